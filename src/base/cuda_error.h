// CUDA runtime errors as epkit Errors: one wording for every GPU layer
// (runtime, bench, the EP engine). In src/base because both the engine
// library and the tools use it, and a program links each definition once.
#pragma once

#include <epkit/result.h>

#ifdef EPKIT_WITH_CUDA
#include <cuda_runtime_api.h>

#include <string>

namespace epkit {

/// "cudaErrorNoDevice (no CUDA-capable device is detected)".
std::string describe_cuda(cudaError_t rc);
/// A cuda error "what: cudaErrorX (text)".
Error cuda_error(cudaError_t rc, const std::string& what);
/// Success, or cuda_error(rc, what).
Result<void> cuda_ok(cudaError_t rc, const std::string& what);

}  // namespace epkit

#endif
