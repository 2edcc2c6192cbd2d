// The internode Buffer's argument checks, apart from its launchers: pure host
// code over the arguments and what the Buffer was made with, so that a CPU
// test reaches every refusal with crafted arguments (no GPU, no Buffer).
#pragma once

#include <epkit/ep.h>

#include <cstdint>
#include <span>
#include <vector>

#include "ep/internode/buffer.h"

namespace epkit::ep {

/// InternodeBuffer::init's checks of its options for `ranks` ranks.
Result<void> check_internode_options(const BufferOptions& options, int ranks);
/// dispatch()'s checks, a cached dispatch's (args.handle set) included.
Result<void> check_internode_dispatch(const DispatchArgs& args, int ranks,
                                      const BufferOptions& options);
/// combine()'s checks.
Result<void> check_internode_combine(const CombineArgs& args, int ranks);

/// Where a rank of a rail stands: its node, the rail's nodes, its local rank.
struct RailPlace {
  int node = 0;
  int nodes = 0;
  int ranks_per_node = 1;
  int local_rank = 0;
  int global(int of_node) const { return of_node * ranks_per_node + local_rank; }
};

/// What a dispatch learns from the count messages the device-driven leg
/// delivered.
struct LegCounts {
  std::vector<int> rows_to;        // [nodes]: rows of this rank's bucket for each node
  std::vector<int> rows_from;      // [nodes]: rows received from each node
  std::vector<int> segment_begin;  // [nodes + 1]: prefix of rows_from
  std::vector<int> offset_at;      // [nodes]: where this rank's rows land at each node
};

/// Checks the count messages a rank received (`received`, one slot of
/// `message_ints` per node; its own node's is its own) and sent (`sent`)
/// as hostile input: this call's sequence first and last, every row count
/// in 0..max_tokens, a message's rows equal to its rows vector's entry for
/// this node, tokens per local rank within the rows, tokens per expert
/// within rows x max_topk. Errors name the sending rank.
Result<LegCounts> check_leg_messages(std::span<const std::int32_t> received,
                                     std::span<const std::int32_t> sent, const RailPlace& place,
                                     const k::MessageFormat& format, int message_ints,
                                     std::int32_t sequence, int max_tokens, int max_topk);

}  // namespace epkit::ep
