// layout(): per-rank and per-expert token counts and is_token_in_rank from
// topk_idx (DeepEP's get_dispatch_layout). Local only; no peer is touched.
#include "ep/core/ep_device.cuh"

namespace epkit::ep::kernels {
namespace {

constexpr int k_layout_threads = 256;
// Up to this many tokens one block of k_single_threads does the whole
// layout and stores the counts itself: no memsets before it (each is a few
// microseconds of host time, most of a small layout call's).
constexpr int k_single_block_tokens = 8192;
constexpr int k_single_threads = 1024;

template <bool Single>
__global__ void __launch_bounds__(Single ? k_single_threads : k_layout_threads)
    layout_kernel(LayoutParams p) {
  __shared__ int expert_count[k_max_experts];
  __shared__ int rank_count[k_max_global_ranks];
  __shared__ int node_count[k_max_nodes];
  for (int i = threadIdx.x; i < p.num_experts; i += blockDim.x) expert_count[i] = 0;
  for (int i = threadIdx.x; i < p.num_ranks; i += blockDim.x) rank_count[i] = 0;
  if (threadIdx.x < k_max_nodes) node_count[threadIdx.x] = 0;
  __syncthreads();

  const int experts_per_rank = p.num_experts / p.num_ranks;
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < p.num_tokens;
       t += Single ? blockDim.x : p.num_tokens) {
    bool* row = p.is_token_in_rank + static_cast<std::int64_t>(t) * p.num_ranks;
    for (int r = 0; r < p.num_ranks; ++r) row[r] = false;
    // Ranks and nodes this token goes to, each once (top-k is at most 32).
    int ranks[32];
    int num_dst = 0;
    std::uint32_t nodes = 0;
    for (int k = 0; k < p.num_topk; ++k) {
      std::int64_t e = p.topk_int64
                           ? static_cast<const std::int64_t*>(p.topk)[t * p.topk_stride + k]
                           : static_cast<const std::int32_t*>(p.topk)[t * p.topk_stride + k];
      if (p.topk_copy != nullptr) {
        const std::int64_t at = static_cast<std::int64_t>(t) * p.num_topk + k;
        if (p.topk_int64)
          static_cast<std::int64_t*>(p.topk_copy)[at] = e;
        else
          static_cast<std::int32_t*>(p.topk_copy)[at] = static_cast<std::int32_t>(e);
      }
      if (e < 0) continue;  // -1: this slot routes nowhere
      if (e >= p.num_experts) {
        // Reported to the host (first one wins); the slot is ignored.
        if (p.mailbox != nullptr &&
            atomicCAS(const_cast<int*>(&p.mailbox->error), 0, k_bad_expert) == 0) {
          p.mailbox->error_rank = t;
          p.mailbox->error_value = e;
        }
        continue;
      }
      atomicAdd(&expert_count[e], 1);
      const int r = static_cast<int>(e) / experts_per_rank;
      bool seen = false;
      for (int i = 0; i < num_dst; ++i) seen = seen || ranks[i] == r;
      if (seen) continue;
      ranks[num_dst++] = r;
      row[r] = true;
      atomicAdd(&rank_count[r], 1);
      if (p.ranks_per_node > 0) nodes |= 1u << (r / p.ranks_per_node);
    }
    for (int n = 0; nodes != 0; ++n, nodes >>= 1)
      if (nodes & 1u) atomicAdd(&node_count[n], 1);
  }
  __syncthreads();
  if constexpr (Single) {
    for (int i = threadIdx.x; i < p.num_experts; i += blockDim.x)
      p.num_tokens_per_expert[i] = expert_count[i];
    for (int i = threadIdx.x; i < p.num_ranks; i += blockDim.x)
      p.num_tokens_per_rank[i] = rank_count[i];
    if (p.ranks_per_node > 0 && threadIdx.x < p.num_ranks / p.ranks_per_node)
      p.num_tokens_per_node[threadIdx.x] = node_count[threadIdx.x];
  } else {
    for (int i = threadIdx.x; i < p.num_experts; i += blockDim.x)
      if (expert_count[i] != 0) atomicAdd(&p.num_tokens_per_expert[i], expert_count[i]);
    for (int i = threadIdx.x; i < p.num_ranks; i += blockDim.x)
      if (rank_count[i] != 0) atomicAdd(&p.num_tokens_per_rank[i], rank_count[i]);
    if (p.ranks_per_node > 0 && threadIdx.x < p.num_ranks / p.ranks_per_node &&
        node_count[threadIdx.x] != 0)
      atomicAdd(&p.num_tokens_per_node[threadIdx.x], node_count[threadIdx.x]);
  }
}

}  // namespace

cudaError_t launch_layout(const LayoutParams& p, cudaStream_t stream) {
  if (p.num_tokens <= k_single_block_tokens) {
    layout_kernel<true><<<1, k_single_threads, 0, stream>>>(p);
    return cudaGetLastError();
  }
  cudaError_t rc = cudaMemsetAsync(p.num_tokens_per_rank, 0, sizeof(int) * p.num_ranks, stream);
  if (rc != cudaSuccess) return rc;
  rc = cudaMemsetAsync(p.num_tokens_per_expert, 0, sizeof(int) * p.num_experts, stream);
  if (rc == cudaSuccess && p.ranks_per_node > 0)
    rc = cudaMemsetAsync(p.num_tokens_per_node, 0, sizeof(int) * (p.num_ranks / p.ranks_per_node),
                         stream);
  if (rc != cudaSuccess || p.num_tokens == 0) return rc;
  int blocks = (p.num_tokens + k_layout_threads - 1) / k_layout_threads;
  layout_kernel<false><<<blocks, k_layout_threads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
