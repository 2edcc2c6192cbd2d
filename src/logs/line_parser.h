// One log line split into its prefixes and message, without allocating.
//
// Accepted shapes (any launcher prefixes first, then an optional NCCL prefix):
//   [rank3]:...            torchrun (--tee / local_ranks_filter)
//   [default3]:...         torchrun's default log prefix
//   3: ...                 srun --label
//   [1,3]<stdout>:...      Open MPI --tag-output (also [nspace@1,3]<stderr>:)
//   [pod/NAME/CONTAINER] ...  kubectl logs --prefix (names a host, no rank)
//   2026-11-24T09:42:05.123456789Z ...  kubectl logs --timestamps (RFC 3339)
//   node1:12345:12367 [0] NCCL INFO <message>
//   node1:12345:12367 [0] NVSHMEM INFO <message>           (NVSHMEM_DEBUG=INFO)
//   node1:12345:12367 [0] /src/file.cpp:12 NVSHMEM WARN <message>
// Everything else is an "other" line: its message is the line after the
// launcher prefixes.
#pragma once

#include <cstdint>
#include <string_view>

namespace epkit::logs {

enum class Level { none, info, warn, trace, other };

struct LineInfo {
  int launcher_rank = -1;     // from [rankN]:, [defaultN]:, "N: " or [1,N]<stdout>:; -1 if none
  std::string_view pod;       // NAME of a kubectl [pod/NAME/CONTAINER] prefix; empty if none
  std::string_view rank_key;  // "host:pid" of the NCCL prefix; empty if none
  std::string_view host;
  std::int64_t pid = -1;
  int cuda_dev = -1;             // the [N] after host:pid:tid
  Level level = Level::none;     // none: not an NCCL (or NVSHMEM debug) line
  bool nvshmem = false;          // "host:pid:tid [dev] ... NVSHMEM INFO|WARN ..." (NVSHMEM_DEBUG)
  std::string_view source_path;  // "FILE:LINE" a WARN line names before its level
  std::string_view message;      // after "NCCL <LEVEL> ", or the rest of the line
};

LineInfo parse_line(std::string_view line);

}  // namespace epkit::logs
