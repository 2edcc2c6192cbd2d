// SM copy kernel for `epkit bench p2p`: the bandwidth a kernel gets when it
// moves data itself over NVLink/PCIe, next to the copy engines'.
#pragma once

#ifdef EPKIT_WITH_CUDA

#include <cuda_runtime_api.h>

#include <cstddef>

namespace epkit::bench::kernels {

/// dst[i] = src[i] for `bytes` (a multiple of 16) using `blocks` blocks.
cudaError_t sm_copy(void* dst, const void* src, std::size_t bytes, int blocks,
                    cudaStream_t stream);

}  // namespace epkit::bench::kernels

#endif
