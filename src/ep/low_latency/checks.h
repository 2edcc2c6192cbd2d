// The low-latency mode's argument checks, apart from its launchers: pure host
// code over the arguments and what the Buffer was made with, so that a CPU
// test reaches every refusal with crafted arguments (no GPU, no Buffer).
#pragma once

#include <epkit/ep.h>

#include "ep/low_latency/kernels.h"

namespace epkit::ep {

/// Optional statistics: absent, or a contiguous dtype[size].
Result<void> check_stats(const TensorView& v, const char* name, DType dtype, std::int64_t size);
/// A row-major int64/int32 [tokens, 1..max_topk].
Result<void> check_topk_idx(const TensorView& t, const char* name, std::int64_t tokens,
                            int max_topk);
/// A hook with async is refused, and num_sms must be 1..1024.
Result<void> check_low_latency_order(const char* op, bool hook, const StreamOrder& order,
                                     int num_sms);
/// The region for a call's shape in a Buffer of `ranks` made with `options`,
/// or why the call cannot have it.
Result<kernels::LowLatencyRegion> check_low_latency_region(const char* op,
                                                           const BufferOptions& options, int ranks,
                                                           int max_tokens, int hidden, int experts);
/// low_latency_dispatch()'s checks, and the region of its shape.
Result<kernels::LowLatencyRegion> check_low_latency_dispatch(const LowLatencyDispatchArgs& args,
                                                             const BufferOptions& options,
                                                             int ranks);
/// low_latency_combine()'s checks, and the region of its shape.
Result<kernels::LowLatencyRegion> check_low_latency_combine(const LowLatencyCombineArgs& args,
                                                            const BufferOptions& options,
                                                            int ranks);

}  // namespace epkit::ep
