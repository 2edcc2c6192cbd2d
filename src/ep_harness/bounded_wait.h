// A host wait for the GPU that ends: the engine bounds every wait inside its
// kernels (each names the rank it waited for), but a kernel that never
// starts has no clock, and a plain cudaStreamSynchronize would wait for it
// for ever. Where ranks share one GPU, another rank's blocks spinning on a
// peer can hold every SM; `epkit test ep` must then fail, named, rather
// than hang until the scheduler kills it.
#pragma once

#include <epkit/result.h>
#include <fmt/format.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "runtime/deadline.h"

#ifdef EPKIT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace epkit::harness {

/// How the awaited work stands at one poll.
enum class Progress { done, running, failed };

/// Polls `query` (returning {Progress, why}) until the work is done, fails,
/// or `deadline` passes; naps `nap` between polls. `what` names the work
/// in the error; a failure keeps `code` and its why, an expiry is a timeout
/// that says no in-kernel wait gave up.
template <class Query>
Result<void> wait_polled(Query&& query, runtime::Deadline deadline, const std::string& what,
                         double bound_s, ErrorCode code = ErrorCode::cuda,
                         std::chrono::microseconds nap = std::chrono::microseconds(100)) {
  for (;;) {
    auto [progress, why] = query();
    if (progress == Progress::done) return {};
    if (progress == Progress::failed) return Error{code, fmt::format("{}: {}", what, why)};
    if (deadline.expired())
      return Error{ErrorCode::timeout,
                   fmt::format("{}: the GPU had not finished this rank's work after {:g} s, and no "
                               "wait inside the engine's kernels gave up (each is bounded by the "
                               "Buffer's timeout): a kernel that never started (where ranks share "
                               "a GPU, other ranks' blocks may hold its SMs) or a wait with no "
                               "bound",
                               what, bound_s)};
    std::this_thread::sleep_for(nap);
  }
}

/// How long the harness waits for one operation's kernels: past every
/// bound inside them (a wait behind another wait, a barrier's longer
/// bound), so that theirs, which name the rank, expire first.
inline double gpu_wait_bound_s(double timeout_s) {
  return 4.0 * timeout_s + 30.0;
}

#ifdef EPKIT_WITH_CUDA
/// wait_polled on a stream (cudaStreamQuery) or an event (cudaEventQuery).
Result<void> wait_stream(cudaStream_t stream, double timeout_s, const std::string& what);
Result<void> wait_event(cudaEvent_t event, double timeout_s, const std::string& what);
#endif

}  // namespace epkit::harness
