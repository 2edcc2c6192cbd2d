// What the engine lends its test harness (src/ep_harness/) and the tests of
// both, beside the public API of <epkit/ep.h>: device memory the harness
// allocates the same way the engine does, and the few internal figures a
// check or a byte count must read from the engine itself so that it follows
// the engine when a format changes. The harness includes this header and
// <epkit/ep.h>, never a file under ep/core/ or a mode's folder; anything more
// it needs is added here, declared and documented, so that the engine's
// private files can change without the harness noticing.
#pragma once

#include <epkit/ep.h>
#include <epkit/result.h>

#include <cstddef>
#include <cstdint>

#include "ep/core/device_memory.h"  // DeviceMemory, DeviceTensor, to_host

namespace epkit::ep::testing {

/// The low-latency mode's largest top-k (its kernels' per-token slot count).
int low_latency_max_topk();

/// Why the low-latency mode would refuse this shape (max tokens per rank,
/// hidden, ranks, experts), or nothing: the check that sizes its region.
Result<void> check_low_latency_shape(int max_tokens, int hidden, int num_ranks, int num_experts);

/// The bytes of one packed row the internode engine sends over the network
/// (its own row format): x of x_dtype with hidden elements, plus top-k
/// indices of topk_size bytes each and, with_weights, their weights.
std::size_t internode_row_bytes(DType x_dtype, int hidden, int topk_size, int num_topk,
                                bool with_weights, int ranks_per_node);

/// The bytes of the counts message one rank sends to each other node per
/// dispatch across nodes, for these options and this many ranks.
std::int64_t internode_message_bytes(const BufferOptions& options, int num_ranks);

}  // namespace epkit::ep::testing
