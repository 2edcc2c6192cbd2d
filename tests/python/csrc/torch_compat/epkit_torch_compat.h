// What epkit._C uses from a newer PyTorch than Debian's libtorch-dev (1.13),
// declared for the extension's syntax check (ctest python.extension_compiles)
// only: nothing here is built or run. The extension itself is compiled on the
// user's machine against the PyTorch installed there (epkit/_build_ext.py).
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

#include <torch/version.h>

#include <functional>

// Declared only for a PyTorch older than the one that has them, so a newer
// libtorch-dev (whose own definitions would clash) needs no change here.
#if TORCH_VERSION_MAJOR < 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 1)
namespace at {
// PyTorch 2.1 added the FP8 dtypes; any dtype no other switch case uses will do.
constexpr c10::ScalarType kFloat8_e4m3fn = c10::ScalarType::Byte;
}  // namespace at
#endif

#if TORCH_VERSION_MAJOR < 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 5)
namespace c10::cuda::CUDACachingAllocator {
// PyTorch 2.5's MemPool entry points, as they are declared there.
void beginAllocateToPool(c10::DeviceIndex device, MempoolId_t mempool_id,
                         std::function<bool(cudaStream_t)> filter);
void endAllocateToPool(c10::DeviceIndex device, MempoolId_t mempool_id);
void releasePool(c10::DeviceIndex device, MempoolId_t mempool_id);
}  // namespace c10::cuda::CUDACachingAllocator
#endif
