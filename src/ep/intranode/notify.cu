// The count exchange before a dispatch (DeepEP's notify_dispatch): every
// rank writes its per-rank counts and, for each peer, the counts of that
// peer's experts into the peer's Meta; one barrier; then each rank builds
// the rank prefix matrix, its per-expert receive counts (to the host through
// the mailbox) and, for each of its tokens, the row it takes in every
// destination's receive buffer (send_row), which the dispatch kernel writes
// to directly.
#include "ep/core/ep_device.cuh"
#include "ep/intranode/kernels.h"

namespace epkit::ep::kernels {
namespace {

constexpr int k_notify_threads = 512;

// Exclusive scan over the block; returns this thread's prefix.
__device__ int block_exclusive_scan(int value) {
  __shared__ int warp_total[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  int inclusive = value;
  for (int d = 1; d < 32; d <<= 1) {
    int other = __shfl_up_sync(0xffffffffu, inclusive, d);
    if (lane >= d) inclusive += other;
  }
  if (lane == 31) warp_total[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int n_warps = blockDim.x >> 5;
    int total = lane < n_warps ? warp_total[lane] : 0;
    for (int d = 1; d < 32; d <<= 1) {
      int other = __shfl_up_sync(0xffffffffu, total, d);
      if (lane >= d) total += other;
    }
    if (lane < n_warps) warp_total[lane] = total;  // inclusive over warps
  }
  __syncthreads();
  int warp_base = warp == 0 ? 0 : warp_total[warp - 1];
  return warp_base + inclusive - value;
}

__device__ void exchange_counts(const NotifyParams& p) {
  const int n = p.sync.num_ranks;
  const int me = p.sync.rank;
  const int experts_per_rank = p.num_experts / n;
  __shared__ int offsets[k_max_ranks];
  __shared__ int num_recv;

  for (int i = threadIdx.x; i < n * n; i += blockDim.x)
    p.meta[i / n]->counts[me][i % n] = p.num_tokens_per_rank[i % n];
  for (int i = threadIdx.x; i < n * experts_per_rank; i += blockDim.x) {
    int dst = i / experts_per_rank;
    p.meta[dst]->expert_counts[me][i % experts_per_rank] = p.num_tokens_per_expert[i];
  }
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x < 32) rank_barrier_warp(p.sync, epoch_base(p.sync) + 1, true);
  __syncthreads();

  const volatile Meta* mine = p.meta[me];
  if (threadIdx.x < n) {
    const int dst = threadIdx.x;
    int acc = 0;
    for (int src = 0; src < n; ++src) {
      if (src == me) offsets[dst] = acc;
      acc += mine->counts[src][dst];
      p.rank_prefix_matrix[src * n + dst] = acc;
    }
    if (dst == me) num_recv = acc;
  }
  __syncthreads();
  if (p.num_worst_tokens > 0 && num_recv > p.num_worst_tokens && threadIdx.x == 0)
    fail(p.sync.mailbox, k_worst_too_small, me, num_recv);

  const int align = p.expert_alignment;
  for (int e = threadIdx.x; e < experts_per_rank; e += blockDim.x) {
    int count = 0;
    for (int src = 0; src < n; ++src) count += mine->expert_counts[src][e];
    count = (count + align - 1) / align * align;
    p.recv_tokens_per_expert[e] = count;
    if (p.num_worst_tokens == 0) p.sync.mailbox->expert_counts[e] = count;
  }
  // Hand the offsets to the scan blocks of this grid.
  if (threadIdx.x < n) p.offsets_scratch[threadIdx.x] = offsets[threadIdx.x];
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    store_release_gpu(p.offsets_scratch + k_max_ranks,
                      static_cast<int>((epoch_base(p.sync) + 1) & 0x7fffffff));
    if (p.num_worst_tokens == 0) {
      p.sync.mailbox->num_recv = num_recv;
      __threadfence_system();
      p.sync.mailbox->counts_epoch = p.count_seq;
      __threadfence_system();
    }
  }
}

// Block 1 + dst: the rows of this rank's tokens in dst's receive buffer.
__device__ void scan_rows(const NotifyParams& p, int dst) {
  const int n = p.sync.num_ranks;
  const int per_thread = (p.num_tokens + blockDim.x - 1) / blockDim.x;
  const int begin = min(p.num_tokens, static_cast<int>(threadIdx.x) * per_thread);
  const int end = min(p.num_tokens, begin + per_thread);
  int count = 0;
  for (int t = begin; t < end; ++t)
    count += p.is_token_in_rank[t * p.is_token_in_rank_stride + dst] ? 1 : 0;
  int prefix = block_exclusive_scan(count);

  __shared__ int base;
  if (threadIdx.x == 0) {
    const int want = static_cast<int>((epoch_base(p.sync) + 1) & 0x7fffffff);
    const int* flag = p.offsets_scratch + k_max_ranks;
    std::uint64_t start = global_timer_ns();
    while (load_acquire_gpu(flag) != want) {
      // Twice the barrier's bound: when a peer is missing, block 0's
      // barrier gives up first and names it.
      if (global_timer_ns() - start > 2 * p.sync.timeout_ns + 1000000000ull)
        fail(p.sync.mailbox, k_timeout_local, p.sync.rank, 0);
    }
    base = reinterpret_cast<const volatile int*>(p.offsets_scratch)[dst];
  }
  __syncthreads();
  int row = base + prefix;
  for (int t = begin; t < end; ++t) {
    bool in = p.is_token_in_rank[t * p.is_token_in_rank_stride + dst];
    p.send_row[static_cast<std::int64_t>(t) * n + dst] = in ? row++ : -1;
  }
}

__global__ void __launch_bounds__(k_notify_threads) notify_kernel(NotifyParams p) {
  if (blockIdx.x == 0)
    exchange_counts(p);
  else
    scan_rows(p, blockIdx.x - 1);
}

}  // namespace

cudaError_t launch_notify(const NotifyParams& p, cudaStream_t stream) {
  notify_kernel<<<1 + p.sync.num_ranks, k_notify_threads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
