// One log line split into its prefixes and message, without allocating.
//
// Accepted shapes (any launcher prefixes first, then an optional NCCL prefix):
//   [rank3]:...            torchrun (--tee / local_ranks_filter)
//   [default3]:...         torchrun's default log prefix
//   3: ...                 srun --label
//   node1:12345:12367 [0] NCCL INFO <message>
// Everything else is an "other" line: its message is the line after the
// launcher prefixes.
#pragma once

#include <cstdint>
#include <string_view>

namespace epkit::logs {

enum class Level { none, info, warn, trace, other };

struct LineInfo {
  int launcher_rank = -1;     // from [rankN]:, [defaultN]: or "N: "; -1 if none
  std::string_view rank_key;  // "host:pid" of the NCCL prefix; empty if none
  std::string_view host;
  std::int64_t pid = -1;
  int cuda_dev = -1;          // the [N] after host:pid:tid
  Level level = Level::none;  // none: not an NCCL line
  std::string_view message;   // after "NCCL <LEVEL> ", or the rest of the line
};

LineInfo parse_line(std::string_view line);

}  // namespace epkit::logs
