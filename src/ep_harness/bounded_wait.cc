// The CUDA side of bounded_wait.h: a query's answer as Progress.
#include "ep_harness/bounded_wait.h"

#ifdef EPKIT_WITH_CUDA
#include "base/cuda_error.h"

namespace epkit::harness {
namespace {

std::pair<Progress, std::string> progress_of(cudaError_t rc) {
  if (rc == cudaSuccess) return {Progress::done, {}};
  if (rc == cudaErrorNotReady) return {Progress::running, {}};
  return {Progress::failed, describe_cuda(rc)};
}

}  // namespace

Result<void> wait_stream(cudaStream_t stream, double timeout_s, const std::string& what) {
  const double bound = gpu_wait_bound_s(timeout_s);
  return wait_polled([&] { return progress_of(cudaStreamQuery(stream)); },
                     runtime::Deadline::after_seconds(bound), what, bound);
}

Result<void> wait_event(cudaEvent_t event, double timeout_s, const std::string& what) {
  const double bound = gpu_wait_bound_s(timeout_s);
  return wait_polled([&] { return progress_of(cudaEventQuery(event)); },
                     runtime::Deadline::after_seconds(bound), what, bound);
}

}  // namespace epkit::harness
#endif
