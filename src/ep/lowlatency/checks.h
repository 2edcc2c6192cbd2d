// Argument checks the low-latency launchers share (buffer_low_latency.cc).
#pragma once

#include <epkit/ep.h>

namespace epkit::ep {

/// Optional statistics: absent, or a contiguous dtype[size].
Result<void> check_stats(const TensorView& v, const char* name, DType dtype, std::int64_t size);
/// A row-major int64/int32 [tokens, 1..max_topk].
Result<void> check_topk_idx(const TensorView& t, const char* name, std::int64_t tokens,
                            int max_topk);
/// A hook with async is refused, and num_sms must be 1..1024.
Result<void> check_low_latency_order(const char* op, bool hook, const StreamOrder& order,
                                     int num_sms);

}  // namespace epkit::ep
