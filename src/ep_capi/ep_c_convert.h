// Conversions and error plumbing shared by the C ABI's entry points: C tensor
// descriptors <-> ep::TensorView, Result errors -> status codes, and the
// thread-local last-error message.
#pragma once

#include <cuda_runtime_api.h>
#include <epkit/ep.h>
#include <epkit/ep_c.h>

#include <exception>
#include <string>

namespace epkit::capi {

extern thread_local std::string t_last_error;

/// Records `message` as this thread's last error and returns `status`.
epkit_ep_status fail(epkit_ep_status status, std::string message);
epkit_ep_status fail_with(const Error& error);
epkit_ep_status status_of(ErrorCode code);

/// Runs `body`, turning any exception into EPKIT_EP_ERR_INTERNAL so that
/// none crosses the ABI.
template <typename F>
epkit_ep_status guard(F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(EPKIT_EP_ERR_INTERNAL, "out of host memory");
  } catch (const std::exception& e) {
    return fail(EPKIT_EP_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(EPKIT_EP_ERR_INTERNAL, "internal error: unknown exception");
  }
}

ep::BufferOptions to_options(const epkit_ep_options& o);
/// A C descriptor as a view; all zero (ndim 0, no data) means "not given".
epkit_ep_status to_view(const epkit_ep_tensor& t, const char* name, ep::TensorView& out);
epkit_ep_tensor from_view(const ep::TensorView& v);

/// The copy of `src` into `dst` (same dtype and shape, rows contiguous) as
/// a span of ep::copy_spans.
epkit_ep_status copy_span(const epkit_ep_tensor& dst, const epkit_ep_tensor& src, int index,
                          ep::CopySpan& span);
/// A new event recorded on `stream`, owned by the caller.
epkit_ep_status record_on(cudaStream_t stream, void** event);
/// What an operation's end does per `order`: order.stream waits (unless
/// async_finish), the event goes to the caller when asked.
epkit_ep_status finish_on(cudaStream_t stream, const epkit_ep_order& order, void** event);

}  // namespace epkit::capi
