// Ring mode's combine (ring_kernels.h, RingCombineParams): the dispatch's
// rings backwards, three blocks per channel.
// - NVLink sender: warps poll the sub-rings to every (forwarder, source
//   node) and write the rows this rank received from that source (x and
//   weights) in the dispatch's order, as room frees.
// - Forwarder: a warp per source node walks that node's stream as the
//   dispatch forwarded it, sums each row's copies from its local ranks in
//   FP32 in local-rank order, rounds to BF16 (DeepEP V1's order) and sends
//   the partial rows back chunk by chunk.
// - Receiver: warps take the channel's tokens in turn, sum each token's
//   partials from every node it reached in FP32 in node order after the
//   bias, round once, and credit each chunk once all its rows are read,
//   in order.
#include "ep/internode/channel_plan.h"
#include "ep/internode/ring_device.cuh"

namespace epkit::ep::kernels {
namespace {

constexpr int k_threads = 1024;
constexpr int k_warps = k_threads / 32;
constexpr int k_max_feeds = k_max_global_ranks / k_warps;

using Ctx = ring::Role<RingCombineParams>;

struct Feed {
  int ring;  // at this rank (heads), by the reader's local rank
  int to;    // the forwarder's local rank
  int n;
  int rows;
  int first;  // first input row
  std::uint64_t start;
  int done;
};

__device__ void nvl_sender(const Ctx& x) {
  const RingCombineParams& p = x.p;
  const RingShape& s = x.s;
  const int c = x.c;
  const int N = s.nodes;
  const int G = s.per_node;
  const int C = s.channels;
  const int S = s.nvl_slots;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  Feed f[k_max_feeds];
  int count = 0;
  for (int q = warp; q < G * N && count < k_max_feeds; q += k_warps) {
    Feed& r = f[count++];
    r.to = q / N;
    r.n = q % N;
    r.ring = s.sub_ring(c, r.to, r.n);
    const int src = r.n * G + r.to;
    r.rows = p.routes.from_rank[src * C + c];
    r.first = p.routes.base[src * C + c];
    r.start = p.counters.nvl_written[r.ring];
    r.done = 0;
  }
  const std::uint64_t* heads =
      reinterpret_cast<const std::uint64_t*>(p.nvl[s.local] + s.nvl_heads());
  const int x_bytes = p.hidden * 2;
  std::uint64_t since = global_timer_ns();
  for (;;) {
    bool pending = false;
    bool moved = false;
    for (int i = 0; i < count; ++i) {
      Feed& r = f[i];
      if (r.done >= r.rows) continue;
      pending = true;
      std::uint64_t head = 0;
      if (lane == 0) head = load_acquire_sys(heads + r.ring);
      head = __shfl_sync(0xffffffffu, head, 0);
      // Rows up to head + S may be written.
      const std::uint64_t room_to = head + S;
      const std::uint64_t next = r.start + r.done;
      if (next >= room_to) continue;
      const int upto = static_cast<int>(min(static_cast<std::uint64_t>(r.rows), room_to - r.start));
      const int at_forwarder = s.sub_ring(c, s.local, r.n);
      for (int k = r.done; k < upto; ++k) {
        const std::int64_t in = r.first + k;
        std::uint8_t* dst = p.nvl[r.to] + s.nvl_slot(at_forwarder, r.start + k);
        ring::warp_copy(dst, reinterpret_cast<const std::uint8_t*>(p.x + in * p.x_stride), x_bytes);
        if (lane < p.num_topk)
          reinterpret_cast<float*>(dst + x_bytes)[lane] = p.weights[in * p.weights_stride + lane];
      }
      r.done = upto;
      moved = true;
      __threadfence_system();
      __syncwarp();
      if (lane == 0)
        store_release_sys(
            reinterpret_cast<std::uint64_t*>(p.nvl[r.to] + s.nvl_tails()) + at_forwarder,
            r.start + r.done);
    }
    if (!pending) break;
    const std::uint64_t now = global_timer_ns();
    if (moved) {
      if (lane == 0 && now > since + 1000) ring::profile_add(p.profile, 2, since);
      since = now;
    } else if (now - since > static_cast<std::uint64_t>(p.nvl_timeout_ns) && lane == 0) {
      for (int i = 0; i < count; ++i)
        if (f[i].done < f[i].rows)
          ring::give_up(p.leg, p.mailbox, s.node * G + f[i].to, k_ring_wait_nvl_room,
                        static_cast<std::uint64_t>(f[i].done),
                        static_cast<std::uint64_t>(f[i].rows));
    }
  }
  if (lane == 0)
    for (int i = 0; i < count; ++i) p.counters.nvl_written[f[i].ring] = f[i].start + f[i].rows;
}

__device__ void forwarder(const Ctx& x) {
  const RingCombineParams& p = x.p;
  const RingShape& s = x.s;
  const int c = x.c;
  const int N = s.nodes;
  const int G = s.per_node;
  const int K = s.chunk_rows;
  const int NC = s.net_chunks;
  const int lane = threadIdx.x & 31;
  const int n = threadIdx.x >> 5;
  if (n >= N) return;
  const int rows = p.routes.stream[c * N + n];
  const int first = p.routes.stream_first[c * N + n];
  const std::uint64_t base = p.counters.net_sent[c * N + n];
  const int peer = n * G + s.local;
  std::uint64_t read[k_max_ranks];
#pragma unroll
  for (int g = 0; g < k_max_ranks; ++g)
    read[g] = g < G ? p.counters.nvl_read[s.sub_ring(c, g, n)] : 0;
  const std::uint64_t* tails =
      reinterpret_cast<const std::uint64_t*>(p.nvl[s.local] + s.nvl_tails());
  const int x_bytes = p.hidden * 2;
  const int n8 = p.hidden >> 3;
  for (int j0 = 0; j0 < rows; j0 += K) {
    const std::uint64_t msg = base + j0 / K;
    const int in_chunk = min(K, rows - j0);
    if (lane == 0 && msg >= static_cast<std::uint64_t>(NC)) {
      const std::uint64_t t0 = global_timer_ns();
      ring::wait_signal(p.leg, s.credit_signal(c, n), msg + 1 - NC, p.timeout_ns, peer,
                        k_ring_wait_credit, p.mailbox);
      ring::profile_add(p.profile, 3, t0);
    }
    __syncwarp();
    const std::uint64_t slot = n == s.node ? s.recv_slot(c, s.node, msg) : s.send_slot(c, n, msg);
    std::uint8_t* chunk = p.window + slot;
    for (int r = 0; r < in_chunk; ++r) {
      const int mk = p.routes.mask[static_cast<std::int64_t>(n) * s.max_tokens + first + j0 + r];
      // Every copy of the row is here first (bounded), then the sums.
      const std::uint64_t t0 = global_timer_ns();
      for (int g = 0; g < G; ++g)
        if ((mk >> g & 1) != 0 && lane == 0)
          ring::wait_word(p.leg, tails + s.sub_ring(c, g, n), read[g] + 1, p.nvl_timeout_ns,
                          s.node * G + g, k_ring_wait_nvl_rows, p.mailbox);
      if (lane == 0) ring::profile_add(p.profile, 2, t0);
      __syncwarp();
      std::uint8_t* out = chunk + static_cast<std::int64_t>(r) * p.row_bytes;
      for (int i = lane; i < n8; i += 32) {
        float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        for (int g = 0; g < G; ++g)
          if ((mk >> g & 1) != 0)
            add_bf16x8(acc, __ldcg(reinterpret_cast<const int4*>(
                                       p.nvl[s.local] + s.nvl_slot(s.sub_ring(c, g, n), read[g])) +
                                   i));
        reinterpret_cast<int4*>(out)[i] = pack_bf16x8(acc);
      }
      if (lane < p.num_topk) {
        float acc = 0.0f;
        for (int g = 0; g < G; ++g)
          if ((mk >> g & 1) != 0)
            acc = acc +
                  __ldcg(reinterpret_cast<const float*>(
                             p.nvl[s.local] + s.nvl_slot(s.sub_ring(c, g, n), read[g]) + x_bytes) +
                         lane);
        reinterpret_cast<float*>(out + x_bytes)[lane] = acc;
      }
      // The copies are read: their slots go back to their ranks.
      __threadfence_system();
      __syncwarp();
      for (int g = 0; g < G; ++g) {
        if ((mk >> g & 1) == 0) continue;
        read[g] += 1;
        if (lane == 0)
          store_release_sys(reinterpret_cast<std::uint64_t*>(p.nvl[g] + s.nvl_heads()) +
                                s.sub_ring(c, s.local, n),
                            read[g]);
      }
      __syncwarp();
    }
    if (n == s.node) {
      if (lane == 0) ring::add_local(p.leg, s.tail_signal(c, s.node, msg), 1);
      __syncwarp();
    } else {
      __threadfence();
      __syncwarp();
      const std::uint64_t t0 = global_timer_ns();
      ring::put(p.leg, peer, s.recv_slot(c, s.node, msg), slot,
                static_cast<std::uint64_t>(in_chunk) * p.row_bytes, s.tail_signal(c, s.node, msg),
                1, p.timeout_ns, p.mailbox);
      if (lane == 0) ring::profile_add(p.profile, 4, t0);
    }
  }
  if (lane < G) {
#pragma unroll
    for (int g = 0; g < k_max_ranks; ++g)
      if (g == lane) p.counters.nvl_read[s.sub_ring(c, g, n)] = read[g];
  }
  if (lane == 0) p.counters.net_sent[c * N + n] = base + (rows + K - 1) / K;
}

// Lane 0: chunk `msg` of ring (c, from node m) is read; credits every chunk
// finished in order from the pointer on (several warps finish chunks out of
// order; the one that moves the pointer sends that chunk's credit).
__device__ int finish_chunk(const RingCombineParams& p, const RingShape& s, int c, int m,
                            std::uint64_t msg, int in_chunk) {
  const int NC = s.net_chunks;
  const int at = (c * s.nodes + m) * NC + static_cast<int>(msg % NC);
  __threadfence();
  if (atomicAdd(p.counters.draining + at, 1) + 1 != in_chunk) return 0;
  p.counters.draining[at] = 0;
  __threadfence();
  atomicExch(reinterpret_cast<unsigned long long*>(p.counters.drained + at),
             static_cast<unsigned long long>(msg + 1));
  int credits = 0;
  auto* next = reinterpret_cast<unsigned long long*>(p.counters.net_credited + c * s.nodes + m);
  for (;;) {
    const unsigned long long cur = atomicAdd(next, 0ull);
    const int slot = (c * s.nodes + m) * NC + static_cast<int>(cur % NC);
    if (atomicAdd(reinterpret_cast<unsigned long long*>(p.counters.drained + slot), 0ull) !=
        cur + 1)
      break;
    if (atomicCAS(next, cur, cur + 1) == cur) ++credits;
  }
  return credits;
}

__device__ void receiver(const Ctx& x) {
  const RingCombineParams& p = x.p;
  const RingShape& s = x.s;
  const int c = x.c;
  const int N = s.nodes;
  const int K = s.chunk_rows;
  const int NC = s.net_chunks;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const ChannelSplit split{p.routes.num_tokens, s.channels};
  const int* first = p.routes.chan_first + c * N;
  const int* next = p.routes.chan_first + (c + 1) * N;
  __shared__ std::uint64_t base[k_max_nodes];
  if (threadIdx.x < N) base[threadIdx.x] = p.counters.net_received[c * N + threadIdx.x];
  __syncthreads();
  const int x_bytes = p.hidden * 2;
  const int n8 = p.hidden >> 3;
  for (int t = channel_begin(split, c) + warp; t < channel_begin(split, c + 1); t += k_warps) {
    const int my_row = lane < N ? p.routes.send_row[static_cast<std::int64_t>(t) * N + lane] : -1;
    const int j = my_row >= 0 ? my_row - first[lane] : -1;
    const std::uint64_t msg = j >= 0 ? base[lane] + j / K : 0;
    const std::uint64_t t0 = global_timer_ns();
    if (j >= 0)
      ring::wait_signal(p.leg, s.tail_signal(c, lane, msg), msg / NC + 1, p.timeout_ns,
                        lane * s.per_node + s.local, k_ring_wait_chunk, p.mailbox);
    __syncwarp();
    if (lane == 0) ring::profile_add(p.profile, 5, t0);
    const std::uint8_t* rows[k_max_nodes];
#pragma unroll
    for (int m = 0; m < k_max_nodes; ++m) {
      const int jm = __shfl_sync(0xffffffffu, j, m);
      const unsigned long long mm =
          __shfl_sync(0xffffffffu, static_cast<unsigned long long>(msg), m);
      rows[m] = m < N && jm >= 0 ? p.window + s.recv_slot(c, m, mm) +
                                       static_cast<std::int64_t>(jm % K) * p.row_bytes
                                 : nullptr;
    }
    int4* out = reinterpret_cast<int4*>(p.out_x + static_cast<std::int64_t>(t) * p.hidden);
    for (int i = lane; i < n8; i += 32) {
      float acc[8] = {};
      for (int b = 0; b < 2; ++b)
        if (p.bias[b] != nullptr)
          add_bf16x8(acc,
                     load_stream(reinterpret_cast<const int4*>(
                                     p.bias[b] + static_cast<std::int64_t>(t) * p.bias_stride[b]) +
                                 i));
      for (int m = 0; m < N; ++m)
        if (rows[m] != nullptr) add_bf16x8(acc, __ldcg(reinterpret_cast<const int4*>(rows[m]) + i));
      out[i] = pack_bf16x8(acc);
    }
    if (p.out_w != nullptr && lane < p.num_topk) {
      float acc = 0.0f;
      for (int m = 0; m < N; ++m)
        if (rows[m] != nullptr)
          acc = acc + __ldcg(reinterpret_cast<const float*>(rows[m] + x_bytes) + lane);
      p.out_w[static_cast<std::int64_t>(t) * p.num_topk + lane] = acc;
    }
    __syncwarp();
    for (int m = 0; m < N; ++m) {
      const int jm = __shfl_sync(0xffffffffu, j, m);
      if (jm < 0) continue;
      const std::uint64_t mm = base[m] + jm / K;
      int credits = 0;
      if (lane == 0)
        credits = finish_chunk(p, s, c, m, mm, min(K, next[m] - first[m] - jm / K * K));
      credits = __shfl_sync(0xffffffffu, credits, 0);
      if (credits == 0) continue;
      if (m == s.node) {
        if (lane == 0) ring::add_local(p.leg, s.credit_signal(c, s.node), credits);
        __syncwarp();
      } else {
        const std::uint64_t t1 = global_timer_ns();
        ring::put(p.leg, m * s.per_node + s.local, 0, 0, 0, s.credit_signal(c, s.node), credits,
                  p.timeout_ns, p.mailbox);
        if (lane == 0) ring::profile_add(p.profile, 4, t1);
      }
    }
  }
  __syncthreads();
  if (threadIdx.x < N) {
    const int rows = next[threadIdx.x] - first[threadIdx.x];
    p.counters.net_received[c * N + threadIdx.x] = base[threadIdx.x] + (rows + K - 1) / K;
  }
}

__global__ void __launch_bounds__(k_threads) ring_combine_kernel(RingCombineParams p) {
  ring::run_roles(p, nvl_sender, forwarder, receiver);
}

}  // namespace

cudaError_t launch_ring_combine(const RingCombineParams& p, cudaStream_t stream) {
  const RingShape& s = p.shape;
  if (!s.launchable(p.leg) || p.hidden % 8 != 0 || p.num_topk > 32 || p.row_bytes > s.slot_pitch ||
      p.row_bytes < p.hidden * 2 + p.num_topk * 4 || p.row_bytes % 16 != 0)
    return cudaErrorInvalidValue;
  ring_combine_kernel<<<3 * s.channels, k_threads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
