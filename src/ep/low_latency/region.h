// Where a low-latency shape puts its arrays in a rank's region (host side,
// no GPU): the same function sizes BufferOptions::low_latency_bytes
// (Buffer::low_latency_size_hint) and places every array a kernel touches.
#pragma once

#include <epkit/result.h>

#include "ep/low_latency/kernels.h"

namespace epkit::ep::low_latency {

/// The region for (max tokens per rank, hidden, ranks, experts), or why the
/// shape is not one the low-latency mode takes.
Result<kernels::LowLatencyRegion> region_for(int max_tokens, int hidden, int num_ranks,
                                             int num_experts);

}  // namespace epkit::ep::low_latency
