// Device generators of the test inputs (ep_harness/testdata.h): every value is a
// function of (key, index), so any rank can make any rank's data again.
#pragma once

#ifdef EPKIT_WITH_CUDA

#include <cuda_runtime_api.h>

#include <cstdint>

namespace epkit::harness::kernels {

/// x[i] = BF16 of a N(0, 1) draw from (key, i): splitmix64 of the counter,
/// Box-Muller on two 24-bit uniforms. count elements.
cudaError_t testdata_fill_normal_bf16(void* x, std::int64_t count, std::uint64_t key,
                                      cudaStream_t stream);

/// x[i] = BF16(value) for count elements.
cudaError_t testdata_fill_constant_bf16(void* x, std::int64_t count, float value,
                                        cudaStream_t stream);

/// Per token and 128-channel group: amax = max(max |x|, 1e-4), x_fp8 =
/// E4M3(x * (448 / amax)) saturated to +-448, scale = amax / 448 stored
/// column-major: scales[g * tokens + t]. x and x_fp8 are row-major
/// [tokens, hidden]; hidden is a multiple of 128.
cudaError_t testdata_cast_fp8(const void* x, void* x_fp8, float* scales, int tokens, int hidden,
                              cudaStream_t stream);

}  // namespace epkit::harness::kernels

#endif
