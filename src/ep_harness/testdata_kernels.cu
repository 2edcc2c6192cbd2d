#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "ep_harness/testdata_kernels.h"

namespace epkit::harness::kernels {
namespace {

constexpr int k_threads = 256;
constexpr std::int64_t k_max_blocks = 8192;

int blocks_for(std::int64_t items) {
  return static_cast<int>(std::max<std::int64_t>(
      1, std::min<std::int64_t>((items + k_threads - 1) / k_threads, k_max_blocks)));
}

// The splitmix64 output function: a bijective mix, so distinct counters give
// distinct, well-spread words.
__device__ std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__device__ std::uint64_t counter_hash(std::uint64_t key, std::uint64_t counter) {
  return mix64(key + (counter + 1) * 0x9E3779B97F4A7C15ull);
}

__global__ void fill_normal_kernel(__nv_bfloat16* x, std::int64_t count, std::uint64_t key) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    auto c = static_cast<std::uint64_t>(i) * 2;
    // u1 in (0, 1] keeps the log finite; u2 in [0, 1).
    float u1 = static_cast<float>((counter_hash(key, c) >> 40) + 1) * 0x1p-24f;
    float u2 = static_cast<float>(counter_hash(key, c + 1) >> 40) * 0x1p-24f;
    float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    x[i] = __float2bfloat16_rn(z);
  }
}

__global__ void fill_constant_kernel(__nv_bfloat16* x, std::int64_t count, float value) {
  const __nv_bfloat16 v = __float2bfloat16_rn(value);
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    x[i] = v;
}

// One warp per (token, group of 128 channels); each lane holds 4 channels.
__global__ void cast_fp8_kernel(const __nv_bfloat16* x, __nv_fp8_storage_t* x_fp8, float* scales,
                                int tokens, int hidden) {
  const int groups = hidden / 128;
  const std::int64_t warps = static_cast<std::int64_t>(tokens) * groups;
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (std::int64_t w = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32;
       w < warps; w += static_cast<std::int64_t>(gridDim.x) * blockDim.x / 32) {
    const std::int64_t t = w / groups;
    const int g = static_cast<int>(w % groups);
    const std::int64_t base = t * hidden + static_cast<std::int64_t>(g) * 128 + lane * 4;
    float v[4];
    float amax = 0.0f;
    for (int j = 0; j < 4; ++j) {
      v[j] = __bfloat162float(x[base + j]);
      amax = fmaxf(amax, fabsf(v[j]));
    }
    for (int offset = 16; offset > 0; offset /= 2)
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    // DeepEP's per_token_cast_to_fp8 clamps the amax at 1e-4 (an all-zero
    // group gets a tiny scale, not a division by zero).
    amax = fmaxf(amax, 1e-4f);
    const float inv = 448.0f / amax;
    for (int j = 0; j < 4; ++j)
      x_fp8[base + j] = __nv_cvt_float_to_fp8(v[j] * inv, __NV_SATFINITE, __NV_E4M3);
    if (lane == 0) scales[static_cast<std::int64_t>(g) * tokens + t] = amax / 448.0f;
  }
}

}  // namespace

cudaError_t testdata_fill_normal_bf16(void* x, std::int64_t count, std::uint64_t key,
                                      cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  fill_normal_kernel<<<blocks_for(count), k_threads, 0, stream>>>(static_cast<__nv_bfloat16*>(x),
                                                                  count, key);
  return cudaGetLastError();
}

cudaError_t testdata_fill_constant_bf16(void* x, std::int64_t count, float value,
                                        cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  fill_constant_kernel<<<blocks_for(count), k_threads, 0, stream>>>(static_cast<__nv_bfloat16*>(x),
                                                                    count, value);
  return cudaGetLastError();
}

cudaError_t testdata_cast_fp8(const void* x, void* x_fp8, float* scales, int tokens, int hidden,
                              cudaStream_t stream) {
  if (tokens <= 0 || hidden < 128 || hidden % 128 != 0) return cudaSuccess;
  const std::int64_t threads = static_cast<std::int64_t>(tokens) * (hidden / 128) * 32;
  cast_fp8_kernel<<<blocks_for(threads), k_threads, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(x), static_cast<__nv_fp8_storage_t*>(x_fp8), scales, tokens,
      hidden);
  return cudaGetLastError();
}

}  // namespace epkit::harness::kernels
