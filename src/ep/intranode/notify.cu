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

__device__ void exchange_counts(const NotifyParams& p) {
  const int n = p.sync.num_ranks;
  const int me = p.sync.rank;
  const int segs = p.num_segments;
  const int experts_per_rank = p.num_experts / n;
  __shared__ int offsets[k_max_nodes][k_max_ranks];
  __shared__ int num_recv;

  // Our counts go to every rank: totals per destination (the rank prefix
  // matrix) and, with segments, per (segment, destination).
  for (int i = threadIdx.x; i < n * n; i += blockDim.x) {
    const int dst = i % n;
    int total = 0;
    for (int s = 0; s < segs; ++s) {
      const int c = p.num_tokens_per_rank[s * p.segment_stride_ranks + dst];
      total += c;
      if (segs > 1) p.meta[i / n]->seg_counts[me][s][dst] = c;
    }
    p.meta[i / n]->counts[me][dst] = total;
  }
  for (int i = threadIdx.x; i < n * experts_per_rank; i += blockDim.x) {
    int dst = i / experts_per_rank;
    int total = 0;
    for (int s = 0; s < segs; ++s)
      total += p.num_tokens_per_expert[s * p.segment_stride_experts + i];
    p.meta[dst]->expert_counts[me][i % experts_per_rank] = total;
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
      acc += mine->counts[src][dst];
      p.rank_prefix_matrix[src * n + dst] = acc;
    }
    if (dst == me) num_recv = acc;
    // Where our rows of each segment start at dst: after every row of
    // earlier (segment, forwarder) pairs, global source rank order.
    acc = 0;
    for (int s = 0; s < segs; ++s) {
      for (int src = 0; src < n; ++src) {
        if (src == me) offsets[s][dst] = acc;
        acc += segs > 1 ? mine->seg_counts[src][s][dst] : mine->counts[src][dst];
        if (dst == me && p.recv_gbl_prefix != nullptr) p.recv_gbl_prefix[s * n + src] = acc;
      }
    }
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
  for (int i = threadIdx.x; i < segs * n; i += blockDim.x)
    p.offsets_scratch[(i / n) * k_max_ranks + i % n] = offsets[i / n][i % n];
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    store_release_gpu(p.offsets_scratch + k_max_nodes * k_max_ranks,
                      static_cast<int>((epoch_base(p.sync) + 1) & 0x7fffffff));
    if (p.num_worst_tokens == 0) {
      p.sync.mailbox->num_recv = num_recv;
      __threadfence_system();
      p.sync.mailbox->counts_epoch = p.count_seq;
      __threadfence_system();
    }
  }
}

// Block 1 + dst: the rows of this rank's tokens in dst's receive buffer,
// segment by segment.
__device__ void scan_rows(const NotifyParams& p, int dst) {
  const int n = p.sync.num_ranks;
  __shared__ int base[k_max_nodes];
  __shared__ int bounds[k_max_nodes + 1];
  if (threadIdx.x == 0) {
    const int want = static_cast<int>((epoch_base(p.sync) + 1) & 0x7fffffff);
    const int* flag = p.offsets_scratch + k_max_nodes * k_max_ranks;
    std::uint64_t start = global_timer_ns();
    while (load_acquire_gpu(flag) != want) {
      // Twice the barrier's bound: when a peer is missing, block 0's
      // barrier gives up first and names it.
      if (global_timer_ns() - start > 2 * p.sync.timeout_ns + 1000000000ull)
        fail(p.sync.mailbox, k_timeout_local, p.sync.rank, 0);
    }
    for (int s = 0; s < p.num_segments; ++s)
      base[s] = reinterpret_cast<const volatile int*>(p.offsets_scratch)[s * k_max_ranks + dst];
    // Bounds read on the device are clamped to the rows there are: a bad
    // one must not send a row past them.
    for (int s = 0; s <= p.num_segments; ++s) {
      const int b =
          p.segment_begin_device != nullptr ? p.segment_begin_device[s] : p.segment_begin[s];
      bounds[s] = min(max(b, s > 0 ? bounds[s - 1] : 0), p.num_tokens);
    }
  }
  __syncthreads();
  // Rows past the last segment (num_tokens is then a bound) go nowhere.
  for (int t = bounds[p.num_segments] + threadIdx.x; t < p.num_tokens; t += blockDim.x)
    p.send_row[static_cast<std::int64_t>(t) * n + dst] = -1;
  for (int s = 0; s < p.num_segments; ++s) {
    const int first = bounds[s];
    const int len = bounds[s + 1] - first;
    const int per_thread = (len + blockDim.x - 1) / blockDim.x;
    const int begin = first + min(len, static_cast<int>(threadIdx.x) * per_thread);
    const int end = min(first + len, begin + per_thread);
    int count = 0;
    for (int t = begin; t < end; ++t)
      count += p.is_token_in_rank[t * p.is_token_in_rank_stride + dst] ? 1 : 0;
    int row = base[s] + block_exclusive_scan(count);
    for (int t = begin; t < end; ++t) {
      bool in = p.is_token_in_rank[t * p.is_token_in_rank_stride + dst];
      p.send_row[static_cast<std::int64_t>(t) * n + dst] = in ? row++ : -1;
    }
    __syncthreads();  // the scan's shared totals are reused by the next segment
  }
}

__global__ void __launch_bounds__(k_notify_threads) notify_kernel(NotifyParams p) {
  if (blockIdx.x == 0)
    exchange_counts(p);
  else
    scan_rows(p, blockIdx.x - 1);
}

}  // namespace

cudaError_t launch_notify(const NotifyParams& params, cudaStream_t stream) {
  NotifyParams p = params;
  if (p.num_segments <= 1) {
    p.num_segments = 1;
    p.segment_begin[0] = 0;
    p.segment_begin[1] = p.num_tokens;
  }
  if (p.num_segments > k_max_nodes) return cudaErrorInvalidValue;
  notify_kernel<<<1 + p.sync.num_ranks, k_notify_threads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
