// The sending side of an internode dispatch: the plan (each token's row in
// the bucket of every node it visits, and the count message for each node)
// and the pack (each token's packed row, written once per node).
#include "ep/core/ep_device.cuh"
#include "ep/internode/kernels.h"

namespace epkit::ep::kernels {
namespace {

constexpr int k_plan_threads = 1024;

__global__ void __launch_bounds__(k_plan_threads) plan_kernel(PlanParams p) {
  const int node = blockIdx.x;
  const int ranks = p.ranks_per_node;
  const bool* first_rank = p.is_token_in_rank + node * ranks;
  __shared__ int rank_count[k_max_ranks];
  __shared__ int total;
  if (threadIdx.x < k_max_ranks) rank_count[threadIdx.x] = 0;
  __syncthreads();

  const int per_thread = (p.num_tokens + blockDim.x - 1) / blockDim.x;
  const int begin = min(p.num_tokens, static_cast<int>(threadIdx.x) * per_thread);
  const int end = min(p.num_tokens, begin + per_thread);
  int count = 0;
  int local[k_max_ranks] = {};
  for (int t = begin; t < end; ++t) {
    bool any = false;
    for (int j = 0; j < ranks; ++j) {
      bool in = first_rank[t * p.is_token_in_rank_stride + j];
      local[j] += in ? 1 : 0;
      any = any || in;
    }
    count += any ? 1 : 0;
  }
  // The counts per rank come from is_token_in_rank itself, not from the
  // caller's num_tokens_per_rank: the forwarding rank sizes its copies by them.
  for (int j = 0; j < ranks; ++j)
    if (local[j] != 0) atomicAdd(&rank_count[j], local[j]);
  int row = block_exclusive_scan(count);
  if (threadIdx.x == blockDim.x - 1) total = row + count;
  for (int t = begin; t < end; ++t) {
    bool any = false;
    for (int j = 0; j < ranks; ++j) any = any || first_rank[t * p.is_token_in_rank_stride + j];
    p.send_row[static_cast<std::int64_t>(t) * p.num_nodes + node] = any ? row++ : -1;
  }
  __syncthreads();

  const MessageFormat f{ranks, p.experts_per_node};
  std::int32_t* msg = p.messages + static_cast<std::int64_t>(node) * p.message_ints;
  for (int e = threadIdx.x; e < p.experts_per_node; e += blockDim.x)
    msg[f.experts_at() + e] = p.num_tokens_per_expert[node * p.experts_per_node + e];
  if (threadIdx.x < ranks) msg[f.ranks_at() + threadIdx.x] = rank_count[threadIdx.x];
  if (threadIdx.x == 0) {
    msg[0] = p.sequence;
    msg[f.rows_at()] = total;
    msg[p.message_ints - 1] = p.sequence;
  }
}

__global__ void __launch_bounds__(1024) pack_kernel(PackParams p) {
  const RowFormat& f = p.format;
  const int lane = threadIdx.x & 31;
  const int warps = gridDim.x * (blockDim.x >> 5);
  const int n16 = f.x_bytes >> 4;
  if (p.leg_number != nullptr && blockIdx.x == 0 && threadIdx.x == 0) *p.leg_number += 1;
  for (int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); t < p.num_tokens; t += warps) {
    const int my_row =
        lane < p.num_nodes ? p.send_row[static_cast<std::int64_t>(t) * p.num_nodes + lane] : -1;
    const int4* src = reinterpret_cast<const int4*>(p.x + t * p.x_stride);
    for (int node = 0; node < p.num_nodes; ++node) {
      const int row = __shfl_sync(0xffffffffu, my_row, node);
      if (row < 0) continue;
      std::uint8_t* dst =
          p.buckets + node * p.bucket_stride + static_cast<std::int64_t>(row) * f.pitch;
      for (int i = lane; i < n16; i += 32) reinterpret_cast<int4*>(dst)[i] = load_stream(src + i);
      float* scales = reinterpret_cast<float*>(dst + f.scales_offset);
      for (int i = lane; i < f.num_scales; i += 32)
        scales[i] = p.scales[t * p.scale_stride_token + i * p.scale_stride_hidden];
      if (p.with_routing) {
        if (p.topk != nullptr) {
          const std::int64_t first = static_cast<std::int64_t>(node) * p.experts_per_node;
          for (int k = lane; k < f.num_topk; k += 32) {
            std::int64_t e = f.topk_size == 8
                                 ? static_cast<const std::int64_t*>(p.topk)[t * p.topk_stride + k]
                                 : static_cast<const std::int32_t*>(p.topk)[t * p.topk_stride + k];
            std::int64_t rel = e >= first && e < first + p.experts_per_node ? e - first : -1;
            if (f.topk_size == 8)
              reinterpret_cast<std::int64_t*>(dst + f.topk_offset)[k] = rel;
            else
              reinterpret_cast<std::int32_t*>(dst + f.topk_offset)[k] =
                  static_cast<std::int32_t>(rel);
            if (p.weights != nullptr)
              reinterpret_cast<float*>(dst + f.weights_offset)[k] =
                  p.weights[t * p.weights_stride + k];
          }
        }
        if (lane == 0) *reinterpret_cast<std::int32_t*>(dst + f.src_offset) = t;
        if (lane < f.ranks_per_node)
          reinterpret_cast<bool*>(dst + f.mask_offset)[lane] =
              p.is_token_in_rank[t * p.is_token_in_rank_stride + node * f.ranks_per_node + lane];
      }
      if (p.done != nullptr && node != p.own_node) {
        // The row is written: count it in its chunk (the leg's exchange
        // acquires the count, then reads the row). Warps take tokens in
        // order, so chunks fill in turn.
        __syncwarp();
        if (lane == 0) {
          __threadfence();
          atomicAdd(p.done + node * p.chunks + chunk_of(row, p.rows_to[node], p.chunks), 1);
        }
      }
    }
  }
}

}  // namespace

cudaError_t launch_plan(const PlanParams& p, cudaStream_t stream) {
  if (p.num_nodes < 1 || p.num_nodes > k_max_nodes || p.ranks_per_node < 1 ||
      p.ranks_per_node > k_max_ranks)
    return cudaErrorInvalidValue;
  plan_kernel<<<p.num_nodes, k_plan_threads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_pack(const PackParams& p, cudaStream_t stream) {
  // No tokens still bumps the leg's number: every rank's exchange counts.
  if (p.num_tokens == 0 && p.leg_number == nullptr) return cudaSuccess;
  pack_kernel<<<p.num_blocks, p.num_warps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
