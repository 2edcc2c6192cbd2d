// The end of an internode combine: every node sent back, for each row of
// this rank's bucket, the sum its ranks made of it; the token's result is
// the sum of those partials in FP32 in node order (after the optional
// biases), rounded once to BF16.
#include "ep/core/ep_device.cuh"
#include "ep/internode/kernels.h"

namespace epkit::ep::kernels {
namespace {

__global__ void __launch_bounds__(1024) reduce_kernel(ReduceParams p) {
  const int lane = threadIdx.x & 31;
  const int warps = gridDim.x * (blockDim.x >> 5);
  const int n16 = p.hidden >> 3;
  __shared__ int first[k_max_nodes];
  for (int m = threadIdx.x; m < p.num_nodes; m += blockDim.x)
    first[m] = p.first_row[m] != nullptr ? *p.first_row[m] : 0;
  __syncthreads();
  for (int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); t < p.num_tokens; t += warps) {
    const int my_row =
        lane < p.num_nodes ? p.send_row[static_cast<std::int64_t>(t) * p.num_nodes + lane] : -1;
    int rows[k_max_nodes];
#pragma unroll
    for (int m = 0; m < k_max_nodes; ++m) {
      rows[m] = __shfl_sync(0xffffffffu, my_row, m);
      if (rows[m] >= 0) rows[m] += first[m];
    }
    int4* out = reinterpret_cast<int4*>(p.out_x + static_cast<std::int64_t>(t) * p.hidden);
    for (int i = lane; i < n16; i += 32) {
      float acc[8] = {};
      for (int b = 0; b < 2; ++b)
        if (p.bias[b] != nullptr)
          add_bf16x8(acc,
                     load_stream(reinterpret_cast<const int4*>(
                                     p.bias[b] + static_cast<std::int64_t>(t) * p.bias_stride[b]) +
                                 i));
      for (int m = 0; m < p.num_nodes; ++m) {
        if (rows[m] < 0) continue;
        const int4* src = reinterpret_cast<const int4*>(p.partial_x[m]) +
                          static_cast<std::int64_t>(rows[m]) * n16 + i;
        add_bf16x8(acc, load_stream(src));
      }
      out[i] = pack_bf16x8(acc);
    }
    if (p.out_w != nullptr && lane < p.num_topk) {
      float acc = 0.0f;
      for (int m = 0; m < p.num_nodes; ++m)
        if (rows[m] >= 0)
          acc = acc + p.partial_w[m][static_cast<std::int64_t>(rows[m]) * p.num_topk + lane];
      p.out_w[static_cast<std::int64_t>(t) * p.num_topk + lane] = acc;
    }
  }
}

}  // namespace

cudaError_t launch_reduce(const ReduceParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return cudaSuccess;
  if (p.num_nodes > k_max_nodes || p.hidden % 8 != 0 || p.num_topk > 32)
    return cudaErrorInvalidValue;
  reduce_kernel<<<p.num_blocks, p.num_warps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
