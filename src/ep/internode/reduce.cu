// The end of an internode combine: every node sent back, for each row of
// this rank's bucket, the sum its ranks made of it; the token's result is
// the sum of those partials in FP32 in node order (after the optional
// biases), rounded once to BF16.
#include "ep/core/ep_device.cuh"
#include "ep/internode/kernels.h"

namespace epkit::ep::kernels {
namespace {

// This thread waits until node m's signal `index` reaches `number`.
__device__ void wait_landed(const ReduceParams& p, int m, std::uint32_t index,
                            std::uint64_t number) {
  wait_leg_signal(p.signals + index, number, p.timeout_ns, m * p.ranks_per_node + p.local_rank,
                  p.mailbox, p.exited);
}

__global__ void __launch_bounds__(1024) reduce_kernel(ReduceParams p) {
  const int lane = threadIdx.x & 31;
  const int warps = gridDim.x * (blockDim.x >> 5);
  const int n16 = p.hidden >> 3;
  const bool gated = p.signals != nullptr;
  __shared__ int first[k_max_nodes];
  __shared__ std::uint64_t number;
  for (int m = threadIdx.x; m < p.num_nodes; m += blockDim.x)
    first[m] = p.first_row[m] != nullptr ? *p.first_row[m] : 0;
  if (threadIdx.x == 0 && p.number != nullptr) number = p.number[0] + 1;
  __syncthreads();
  // Tokens in order: a token's row in each bucket grows with it, so the
  // chunks are waited for in the order they are sent. The weights cross
  // last (one put), so they are summed after every x.
  for (int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); t < p.num_tokens; t += warps) {
    const int my_row =
        lane < p.num_nodes ? p.send_row[static_cast<std::int64_t>(t) * p.num_nodes + lane] : -1;
    if (gated && my_row >= 0 && lane != p.own_node)
      wait_landed(p, lane,
                  p.first_signal + static_cast<std::uint32_t>(lane) * p.signal_stride +
                      static_cast<std::uint32_t>(chunk_of(my_row, p.rows_to[lane], p.chunks)),
                  number);
    __syncwarp();
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
        // Through L2 when gated: the partials landed while this kernel ran.
        add_bf16x8(acc, gated ? load_l2(src) : load_stream(src));
      }
      out[i] = pack_bf16x8(acc);
    }
  }
  if (p.out_w != nullptr) {
    if (gated && threadIdx.x < p.num_nodes && static_cast<int>(threadIdx.x) != p.own_node)
      wait_landed(
          p, static_cast<int>(threadIdx.x),
          p.first_signal + threadIdx.x * p.signal_stride + static_cast<std::uint32_t>(p.chunks),
          number);
    __syncthreads();
    for (int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); t < p.num_tokens;
         t += warps) {
      if (lane >= p.num_topk) continue;
      const std::int64_t base = static_cast<std::int64_t>(t) * p.num_nodes;
      float acc = 0.0f;
      for (int m = 0; m < p.num_nodes; ++m) {
        int row = p.send_row[base + m];
        if (row < 0) continue;
        row += first[m];
        const float* w = p.partial_w[m] + static_cast<std::int64_t>(row) * p.num_topk + lane;
        acc = acc + (gated ? __ldcg(w) : *w);
      }
      p.out_w[static_cast<std::int64_t>(t) * p.num_topk + lane] = acc;
    }
  }
  // The last block moves the count on (every block read it above).
  if (p.number != nullptr) {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      auto* arrived = reinterpret_cast<unsigned long long*>(p.number + 1);
      if (atomicAdd(arrived, 1ull) == gridDim.x - 1) {
        *arrived = 0;
        p.number[0] = number;
        __threadfence();
      }
    }
  }
}

}  // namespace

cudaError_t launch_reduce(const ReduceParams& p, cudaStream_t stream) {
  // No tokens still counts on the leg: every rank's reduces stay in step.
  if (p.num_tokens == 0 && p.number == nullptr) return cudaSuccess;
  if (p.num_nodes > k_max_nodes || p.hidden % 8 != 0 || p.num_topk > 32)
    return cudaErrorInvalidValue;
  reduce_kernel<<<p.num_blocks, p.num_warps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
