#include <cuda_bf16.h>

#include <algorithm>

#include "ep_harness/reference_kernels.h"

namespace epkit::harness::kernels {
namespace {

constexpr int k_threads = 256;
// Enough blocks to fill an H100 several times over; the kernels stride over
// the rest.
constexpr int k_max_blocks = 4096;

int blocks_for(int rows) {
  return std::max(1, std::min(rows, k_max_blocks));
}

// One block per row; V is the widest unit that divides every address and size.
template <typename V>
__global__ void gather_rows_kernel(V* dst, const unsigned char* src, std::int64_t src_stride_bytes,
                                   std::size_t row_units, const int* rows, int num_rows) {
  for (int i = blockIdx.x; i < num_rows; i += gridDim.x) {
    const V* from = reinterpret_cast<const V*>(src + rows[i] * src_stride_bytes);
    V* to = dst + static_cast<std::size_t>(i) * row_units;
    for (std::size_t u = threadIdx.x; u < row_units; u += blockDim.x) to[u] = from[u];
  }
}

template <typename V>
cudaError_t launch_gather(void* dst, const void* src, std::int64_t src_stride_bytes,
                          std::size_t row_bytes, const int* rows, int num_rows,
                          cudaStream_t stream) {
  gather_rows_kernel<V><<<blocks_for(num_rows), k_threads, 0, stream>>>(
      static_cast<V*>(dst), static_cast<const unsigned char*>(src), src_stride_bytes,
      row_bytes / sizeof(V), rows, num_rows);
  return cudaGetLastError();
}

__device__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ float to_float(float v) {
  return v;
}
__device__ void store(__nv_bfloat16* p, float v) {
  *p = __float2bfloat16_rn(v);
}
__device__ void store(float* p, float v) {
  *p = v;
}

// One block per token. The order of the additions is the contract (the
// engine adds in the same order, and the tests compare bits): __fadd_rn
// keeps the compiler from contracting or reordering them.
template <typename T>
__device__ float round_to(float v);
template <>
__device__ float round_to<__nv_bfloat16>(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}
template <>
__device__ float round_to<float>(float v) {
  return v;
}

template <typename T>
__global__ void combine_kernel(T* out, const T* recv, const int* packed_row, int tokens, int ranks,
                               int ranks_per_node, int cols, const T* bias0, const T* bias1) {
  const int per_node = ranks_per_node > 0 ? ranks_per_node : ranks;
  for (int t = blockIdx.x; t < tokens; t += gridDim.x) {
    const int* rows = packed_row + static_cast<std::size_t>(t) * ranks;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      // The biases open the sum: inside the one node's sum, or before the
      // nodes' rounded partials.
      float start = 0.0f;
      const std::size_t at = static_cast<std::size_t>(t) * cols + c;
      if (bias0 != nullptr) start = __fadd_rn(start, to_float(bias0[at]));
      if (bias1 != nullptr) start = __fadd_rn(start, to_float(bias1[at]));
      float total = per_node == ranks ? 0.0f : start;
      for (int first = 0; first < ranks; first += per_node) {
        float acc = per_node == ranks ? start : 0.0f;
        bool any = false;
        for (int r = first; r < first + per_node; ++r) {
          int row = rows[r];
          if (row >= 0) {
            acc = __fadd_rn(acc, to_float(recv[static_cast<std::size_t>(row) * cols + c]));
            any = true;
          }
        }
        if (per_node == ranks)
          total = acc;  // one node: one rounding, at the store
        else if (any)
          total = __fadd_rn(total, round_to<T>(acc));
      }
      store(out + static_cast<std::size_t>(t) * cols + c, total);
    }
  }
}

}  // namespace

cudaError_t reference_gather_rows(void* dst, const void* src, std::int64_t src_stride_bytes,
                                  std::size_t row_bytes, const int* rows, int num_rows,
                                  cudaStream_t stream) {
  if (num_rows <= 0 || row_bytes == 0) return cudaSuccess;
  auto fits = [&](std::size_t unit) {
    return reinterpret_cast<std::uintptr_t>(dst) % unit == 0 &&
           reinterpret_cast<std::uintptr_t>(src) % unit == 0 &&
           static_cast<std::size_t>(src_stride_bytes) % unit == 0 && row_bytes % unit == 0;
  };
  if (fits(sizeof(int4)))
    return launch_gather<int4>(dst, src, src_stride_bytes, row_bytes, rows, num_rows, stream);
  if (fits(sizeof(int)))
    return launch_gather<int>(dst, src, src_stride_bytes, row_bytes, rows, num_rows, stream);
  return launch_gather<unsigned char>(dst, src, src_stride_bytes, row_bytes, rows, num_rows,
                                      stream);
}

cudaError_t reference_combine_bf16(void* out, const void* recv, const int* packed_row, int tokens,
                                   int ranks, int ranks_per_node, int hidden, const void* bias0,
                                   const void* bias1, cudaStream_t stream) {
  if (tokens <= 0 || hidden <= 0) return cudaSuccess;
  combine_kernel<__nv_bfloat16><<<blocks_for(tokens), k_threads, 0, stream>>>(
      static_cast<__nv_bfloat16*>(out), static_cast<const __nv_bfloat16*>(recv), packed_row, tokens,
      ranks, ranks_per_node, hidden, static_cast<const __nv_bfloat16*>(bias0),
      static_cast<const __nv_bfloat16*>(bias1));
  return cudaGetLastError();
}

cudaError_t reference_combine_fp32(float* out, const float* recv, const int* packed_row, int tokens,
                                   int ranks, int ranks_per_node, int cols, cudaStream_t stream) {
  if (tokens <= 0 || cols <= 0) return cudaSuccess;
  combine_kernel<float><<<blocks_for(tokens), k_threads, 0, stream>>>(
      out, recv, packed_row, tokens, ranks, ranks_per_node, cols, nullptr, nullptr);
  return cudaGetLastError();
}

}  // namespace epkit::harness::kernels
