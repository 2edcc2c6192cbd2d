// The intranode Buffer's argument checks, apart from its launchers: pure host
// code over the arguments and what the Buffer was made with, so that a CPU
// test reaches every refusal with crafted arguments (no GPU, no Buffer).
#pragma once

#include <epkit/ep.h>

#include <cstdint>
#include <optional>

#include "ep/intranode/buffer.h"

namespace epkit::ep {

/// BufferImpl::init's checks of its options for `ranks` ranks, and the heap
/// they give.
Result<HeapLayout> check_buffer_options(const BufferOptions& options, int ranks);
/// layout()'s checks of its arguments, and the kernel's parameters they give
/// (outputs not set).
Result<k::LayoutParams> layout_params(const TensorView& topk, int num_experts, int ranks,
                                      int max_tokens);
/// dispatch()'s checks, a cached dispatch's (args.handle set) included.
/// segment_experts: the experts of an internode forwarding dispatch, whose
/// counts come per segment instead of in the arguments.
Result<void> check_dispatch(const DispatchArgs& args, int ranks, const BufferOptions& options,
                            std::optional<int> segment_experts = std::nullopt);
/// A layout's caller-owned outputs (LayoutOutputs) against their shapes:
/// each given one contiguous, of the layout's dtype and size.
Result<void> check_layout_outputs(const LayoutOutputs& into, const TensorView& topk, int ranks,
                                  int experts, int nodes);
/// combine()'s checks (check_combine_extras included).
Result<void> check_combine(const CombineArgs& args, int ranks, const BufferOptions& options);
/// A combine's biases and caller-owned outputs (CombineArgs::bias, out_x,
/// out_topk_weights) against the shape of its result; every mode checks
/// them alike.
Result<void> check_combine_extras(const CombineArgs& a, std::int64_t tokens, std::int64_t hidden,
                                  std::int64_t num_topk);

}  // namespace epkit::ep
