// The intranode Buffer's argument checks, apart from its launchers: pure host
// code over the arguments and what the Buffer was made with, so that a CPU
// test reaches every refusal with crafted arguments (no GPU, no Buffer).
#pragma once

#include <epkit/ep.h>

#include <optional>

#include "ep/core/buffer_impl.h"

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
/// combine()'s checks.
Result<void> check_combine(const CombineArgs& args, int ranks, const BufferOptions& options);

}  // namespace epkit::ep
