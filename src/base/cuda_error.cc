#include "base/cuda_error.h"

#ifdef EPKIT_WITH_CUDA
#include <fmt/format.h>

namespace epkit {

std::string describe_cuda(cudaError_t rc) {
  return fmt::format("{} ({})", cudaGetErrorName(rc), cudaGetErrorString(rc));
}

Error cuda_error(cudaError_t rc, const std::string& what) {
  return make_error(ErrorCode::cuda, fmt::format("{}: {}", what, describe_cuda(rc)));
}

Result<void> cuda_ok(cudaError_t rc, const std::string& what) {
  if (rc == cudaSuccess) return {};
  return cuda_error(rc, what);
}

}  // namespace epkit

#endif
