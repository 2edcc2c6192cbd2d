// Ring mode's dispatch (ring_kernels.h, RingDispatchParams): three blocks
// per channel, all running at once on every rank.
// - Sender: warps take the channel's tokens in turn and pack each token's
//   row once per node it reaches into that node's ring (the own node's ring
//   is this rank's receive ring: no network); the warp that completes a
//   chunk puts it (a chunk's rows may come from several warps).
// - Forwarder: a warp per source node reads that node's stream chunk by
//   chunk and copies each row into the NVLink sub-ring of every local rank
//   it goes to, returning credits to the sender in batches.
// - Receiver: warps poll the sub-rings from every (forwarder, source node)
//   and copy rows into the outputs at their (source rank, channel) base:
//   rows in global source rank, then token, order.
// Every wait is bounded and names the rank it waited for.
#include "ep/internode/channel_plan.h"
#include "ep/internode/ring_device.cuh"

namespace epkit::ep::kernels {
namespace {

constexpr int k_threads = 1024;
constexpr int k_warps = k_threads / 32;

using Ctx = ring::Role<RingDispatchParams>;

__device__ void pack_row(const RingDispatchParams& p, int t, int m, std::uint8_t* dst) {
  const RowFormat& f = p.format;
  const int lane = threadIdx.x & 31;
  const int4* src = reinterpret_cast<const int4*>(p.x + t * p.x_stride);
  for (int i = lane; i < (f.x_bytes >> 4); i += 32)
    reinterpret_cast<int4*>(dst)[i] = load_stream(src + i);
  float* scales = reinterpret_cast<float*>(dst + f.scales_offset);
  for (int i = lane; i < f.num_scales; i += 32)
    scales[i] = p.scales[t * p.scale_stride_token + i * p.scale_stride_hidden];
  if (p.cached) return;
  const int G = p.shape.per_node;
  if (p.topk != nullptr) {
    const std::int64_t first = static_cast<std::int64_t>(m) * G * p.shape.experts_per_rank;
    const std::int64_t span = static_cast<std::int64_t>(G) * p.shape.experts_per_rank;
    for (int k = lane; k < f.num_topk; k += 32) {
      const std::int64_t e = f.topk_size == 8
                                 ? static_cast<const std::int64_t*>(p.topk)[t * p.topk_stride + k]
                                 : static_cast<const std::int32_t*>(p.topk)[t * p.topk_stride + k];
      const std::int64_t rel = e >= first && e < first + span ? e - first : -1;
      if (f.topk_size == 8)
        reinterpret_cast<std::int64_t*>(dst + f.topk_offset)[k] = rel;
      else
        reinterpret_cast<std::int32_t*>(dst + f.topk_offset)[k] = static_cast<std::int32_t>(rel);
      if (p.weights != nullptr)
        reinterpret_cast<float*>(dst + f.weights_offset)[k] = p.weights[t * p.weights_stride + k];
    }
  }
  if (lane == 0) *reinterpret_cast<std::int32_t*>(dst + f.src_offset) = t;
  if (lane < G)
    reinterpret_cast<std::uint8_t*>(dst + f.mask_offset)[lane] =
        p.is_token_in_rank[t * p.in_rank_stride + m * G + lane] ? 1 : 0;
}

__device__ void sender(const Ctx& x) {
  const RingDispatchParams& p = x.p;
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
  if (threadIdx.x < N) base[threadIdx.x] = p.counters.net_sent[c * N + threadIdx.x];
  __syncthreads();
  for (int t = channel_begin(split, c) + warp; t < channel_begin(split, c + 1); t += k_warps) {
    const int my_row = lane < N ? p.routes.send_row[static_cast<std::int64_t>(t) * N + lane] : -1;
    for (int m = 0; m < N; ++m) {
      const int row = __shfl_sync(0xffffffffu, my_row, m);
      if (row < 0) continue;
      const int j = row - first[m];
      const int rows = next[m] - first[m];
      const std::uint64_t msg = base[m] + j / K;
      const int peer = m * s.per_node + s.local;
      if (lane == 0 && msg >= static_cast<std::uint64_t>(NC)) {
        const std::uint64_t t0 = ring::stamp(p.profile);
        ring::wait_signal(p.leg, s.credit_signal(c, m), msg + 1 - NC, p.timeout_ns, peer,
                          k_ring_wait_credit, p.mailbox);
        ring::profile_add(p.profile, ring::k_profile_credit, t0);
      }
      __syncwarp();
      const std::uint64_t slot = m == s.node ? s.recv_slot(c, s.node, msg) : s.send_slot(c, m, msg);
      pack_row(p, t, m, p.window + slot + static_cast<std::uint64_t>(j % K) * p.format.pitch);
      __syncwarp();
      int last = 0;
      const int in_chunk = min(K, rows - j / K * K);
      if (lane == 0) {
        __threadfence();
        std::int32_t* fill = p.counters.filling + (c * N + m) * NC + static_cast<int>(msg % NC);
        if (atomicAdd(fill, 1) + 1 == in_chunk) {
          *fill = 0;
          last = 1;
          __threadfence();
        }
      }
      if (__shfl_sync(0xffffffffu, last, 0) == 0) continue;
      if (m == s.node) {
        if (lane == 0) ring::add_local(p.leg, s.tail_signal(c, s.node, msg), 1);
        __syncwarp();
      } else {
        const std::uint64_t t0 = ring::stamp(p.profile);
        ring::put(p.leg, peer, s.recv_slot(c, s.node, msg), slot,
                  static_cast<std::uint64_t>(in_chunk) * p.format.pitch,
                  s.tail_signal(c, s.node, msg), 1, p.timeout_ns, p.mailbox, p.profile);
        if (lane == 0) ring::profile_add(p.profile, ring::k_profile_put, t0);
      }
    }
  }
  __syncthreads();
  if (threadIdx.x < N) {
    const int rows = next[threadIdx.x] - first[threadIdx.x];
    p.counters.net_sent[c * N + threadIdx.x] = base[threadIdx.x] + (rows + K - 1) / K;
  }
}

__device__ void forwarder(const Ctx& x) {
  const RingDispatchParams& p = x.p;
  const RingShape& s = x.s;
  const int c = x.c;
  const int N = s.nodes;
  const int G = s.per_node;
  const int K = s.chunk_rows;
  const int NC = s.net_chunks;
  const int S = s.nvl_slots;
  const int lane = threadIdx.x & 31;
  // A group of warps per source node: each warp forwards a row of the
  // chunk at a time.
  const ring::Group grp = ring::group_of(N, k_warps);
  __shared__ int chunk_masks[k_warps][32];
  if (grp.id >= N) return;
  const int n = grp.id;
  const int rows = p.routes.stream[c * N + n];
  const int first = p.routes.stream_first[c * N + n];
  const std::uint64_t base = p.counters.net_received[c * N + n];
  std::uint64_t credited = p.counters.net_credited[c * N + n];
  const int peer = n * G + s.local;
  // Sub-ring (c, this rank, n) at each local rank g: rows written before
  // this chunk (every warp of the group keeps the same count).
  std::uint64_t written[k_max_ranks];
#pragma unroll
  for (int g = 0; g < k_max_ranks; ++g)
    written[g] = g < G ? p.counters.nvl_written[s.sub_ring(c, g, n)] : 0;
  const std::uint32_t credit_every = max(1, NC / 2);
  // Rows a wave forwards at once: a warp's each, and never more than a
  // sub-ring holds, so every row waits for room only behind rows whose
  // tails an earlier wave published.
  const int wave = min(grp.size, S);
  std::uint8_t* const mine = p.nvl[s.local];
  const int ring_at_g = s.sub_ring(c, s.local, n);
  for (int j0 = 0; j0 < rows; j0 += K) {
    const std::uint64_t msg = base + j0 / K;
    const int in_chunk = min(K, rows - j0);
    const std::uint8_t* chunk = p.window + s.recv_slot(c, n, msg);
    if (grp.index == 0) {
      if (lane == 0) {
        const std::uint64_t t0 = ring::stamp(p.profile);
        ring::wait_signal(p.leg, s.tail_signal(c, n, msg), msg / NC + 1, p.timeout_ns, peer,
                          k_ring_wait_chunk, p.mailbox);
        ring::profile_add(p.profile, ring::k_profile_chunk, t0);
      }
      __syncwarp();
      // Each row's local ranks, for the whole group.
      int mask = 0;
      if (lane < in_chunk) {
        const std::int64_t at = static_cast<std::int64_t>(n) * s.max_tokens + first + j0 + lane;
        if (p.cached) {
          mask = p.routes.mask[at];
        } else {
          const std::uint8_t* m =
              chunk + static_cast<std::int64_t>(lane) * p.format.pitch + p.format.mask_offset;
          for (int g = 0; g < G; ++g) mask |= __ldcg(m + g) != 0 ? 1 << g : 0;
          p.routes.mask[at] = static_cast<std::uint8_t>(mask);
        }
      }
      chunk_masks[grp.id][lane] = mask;
    }
    grp.sync();
    // Row `lane`'s local ranks (0 past the chunk).
    const int mask = chunk_masks[grp.id][lane];
    for (int r0 = 0; r0 < in_chunk; r0 += wave) {
      const int r = r0 + grp.index;
      if (grp.index < wave && r < in_chunk) {
        const int mk = __shfl_sync(0xffffffffu, mask, r);
        const std::uint8_t* src = chunk + static_cast<std::int64_t>(r) * p.format.pitch;
#pragma unroll
        for (int g = 0; g < k_max_ranks; ++g) {
          // The row's place in g's sub-ring: after the rows before it here.
          const unsigned before = __ballot_sync(0xffffffffu, lane < r && (mask >> g & 1) != 0);
          if (g >= G || (mk >> g & 1) == 0) continue;
          const std::uint64_t idx = written[g] + __popc(before);
          if (lane == 0 && idx >= static_cast<std::uint64_t>(S))
            ring::wait_word(
                p.leg,
                reinterpret_cast<const std::uint64_t*>(mine + s.nvl_heads()) + s.sub_ring(c, g, n),
                idx + 1 - S, p.nvl_timeout_ns, s.node * G + g, k_ring_wait_nvl_room, p.mailbox);
          __syncwarp();
          ring::warp_copy(p.nvl[g] + s.nvl_slot(ring_at_g, idx), src, p.format.pitch);
        }
        __threadfence_system();
      }
      grp.sync();
      // The wave's rows are written: publish each rank's tail.
      const int upto = min(r0 + wave, in_chunk);
      const unsigned in_wave = (upto >= 32 ? 0xffffffffu : (1u << upto) - 1u) & ~((1u << r0) - 1u);
      for (int g = 0; g < G; ++g) {
        const unsigned with_g = __ballot_sync(0xffffffffu, (mask >> g & 1) != 0);
        if (grp.index == 0 && lane == 0 && (with_g & in_wave) != 0)
          store_release_sys(reinterpret_cast<std::uint64_t*>(p.nvl[g] + s.nvl_tails()) + ring_at_g,
                            ring::pick(written, g) +
                                __popc(with_g & ((upto >= 32 ? 0xffffffffu : (1u << upto) - 1u))));
      }
    }
#pragma unroll
    for (int g = 0; g < k_max_ranks; ++g)
      written[g] += __popc(__ballot_sync(0xffffffffu, g < G && (mask >> g & 1) != 0));
    // The chunk is read: credit it (in batches; all at the stream's end).
    const std::uint64_t consumed = msg + 1;
    const bool last = j0 + in_chunk == rows;
    if (consumed - credited >= credit_every || last) {
      const std::uint64_t due = consumed - credited;
      if (grp.index == 0) {
        if (n == s.node) {
          if (lane == 0) ring::add_local(p.leg, s.credit_signal(c, s.node), due);
          __syncwarp();
        } else {
          const std::uint64_t t0 = ring::stamp(p.profile);
          ring::put(p.leg, peer, 0, 0, 0, s.credit_signal(c, s.node), due, p.timeout_ns, p.mailbox,
                    p.profile);
          if (lane == 0) ring::profile_add(p.profile, ring::k_profile_put, t0);
        }
      }
      credited = consumed;
    }
  }
  if (grp.index != 0) return;
  if (lane < G) {
#pragma unroll
    for (int g = 0; g < k_max_ranks; ++g)
      if (g == lane) p.counters.nvl_written[s.sub_ring(c, g, n)] = written[g];
  }
  if (lane == 0) {
    p.counters.net_received[c * N + n] = base + (rows + K - 1) / K;
    p.counters.net_credited[c * N + n] = credited;
  }
}

__device__ void copy_out(const RingDispatchParams& p, const std::uint8_t* row, int out) {
  const RowFormat& f = p.format;
  const int lane = threadIdx.x & 31;
  ring::warp_copy(p.recv_x + static_cast<std::int64_t>(out) * f.x_bytes, row, f.x_bytes);
  for (int i = lane; i < f.num_scales; i += 32)
    p.recv_scales[static_cast<std::int64_t>(out) * f.num_scales + i] =
        __ldcg(reinterpret_cast<const float*>(row + f.scales_offset) + i);
  if (p.cached || f.topk_size == 0 || lane >= f.num_topk) return;
  const int epr = p.shape.experts_per_rank;
  const std::int64_t first = static_cast<std::int64_t>(p.shape.local) * epr;
  const std::int64_t e =
      f.topk_size == 8 ? __ldcg(reinterpret_cast<const long long*>(row + f.topk_offset) + lane)
                       : __ldcg(reinterpret_cast<const int*>(row + f.topk_offset) + lane);
  const std::int64_t local = e >= first && e < first + epr ? e - first : -1;
  const std::int64_t slot = static_cast<std::int64_t>(out) * f.num_topk + lane;
  if (f.topk_size == 8)
    static_cast<std::int64_t*>(p.recv_topk)[slot] = local;
  else
    static_cast<std::int32_t*>(p.recv_topk)[slot] = static_cast<std::int32_t>(local);
  if (p.recv_weights != nullptr) {
    const float w = f.with_weights
                        ? __ldcg(reinterpret_cast<const float*>(row + f.weights_offset) + lane)
                        : 0.0f;
    p.recv_weights[slot] = local >= 0 ? w : 0.0f;
  }
}

__device__ void receiver(const Ctx& x) {
  const RingDispatchParams& p = x.p;
  const RingShape& s = x.s;
  const int c = x.c;
  const int N = s.nodes;
  const int G = s.per_node;
  const int C = s.channels;
  // Padding past the received rows (num_worst_tokens), by channel 0's block.
  if (c == 0 && p.num_worst_tokens > 0 && !p.cached && p.format.num_topk > 0) {
    const int received = p.routes.base[s.ranks() * C];
    const int pad = (p.num_worst_tokens - received) * p.format.num_topk;
    for (int i = threadIdx.x; i < pad; i += blockDim.x) {
      const std::int64_t slot = static_cast<std::int64_t>(received) * p.format.num_topk + i;
      if (p.format.topk_size == 8)
        static_cast<std::int64_t*>(p.recv_topk)[slot] = -1;
      else
        static_cast<std::int32_t*>(p.recv_topk)[slot] = -1;
      if (p.recv_weights != nullptr) p.recv_weights[slot] = 0.0f;
    }
  }
  // Every sub-ring of the channel at this rank, polled by a group of warps
  // each (rings q, q + groups, ...); the group's warps copy a row each.
  __shared__ ring::SubRing drains[k_max_global_ranks];
  __shared__ ring::Seen seen[k_warps][2];
  const int rings = G * N;
  ring::fill_sub_rings(p, s, c, drains, [&](int ring) { return p.counters.nvl_read[ring]; });
  const int groups = ring::polling_groups(rings);
  const ring::Group grp = ring::group_of(groups, k_warps);
  if (grp.id >= groups) return;
  const std::uint64_t* tails =
      reinterpret_cast<const std::uint64_t*>(p.nvl[s.local] + s.nvl_tails());
  std::uint64_t since = global_timer_ns();
  ring::Backoff backoff;
  int turn = 0;
  for (;;) {
    bool pending = false;
    bool moved = false;
    for (int q = grp.id; q < rings; q += groups) {
      ring::SubRing& r = drains[q];
      const ring::Seen at = ring::look(grp, seen[grp.id], turn, r, tails);
      const std::uint64_t tail = at.at;
      const int done = at.done;
      if (done >= r.rows) continue;
      pending = true;
      const int ready = static_cast<int>(min(tail - r.start, static_cast<std::uint64_t>(r.rows)));
      if (ready <= done) continue;
      for (int k = done + grp.index; k < ready; k += grp.size)
        copy_out(p, p.nvl[s.local] + s.nvl_slot(r.ring, r.start + k), r.first + k);
      moved = true;
      // The rows are read: their slots go back to the forwarder.
      __threadfence_system();
      grp.sync();
      if (grp.lead()) {
        r.done = ready;
        store_release_sys(reinterpret_cast<std::uint64_t*>(p.nvl[r.other] + s.nvl_heads()) +
                              s.sub_ring(c, s.local, r.n),
                          r.start + ready);
      }
    }
    if (!pending) break;
    ring::end_round(p.leg, p.mailbox, s, grp, groups, drains, moved, global_timer_ns(), since,
                    backoff, p.nvl_timeout_ns, k_ring_wait_nvl_rows);
  }
  if (grp.lead())
    for (int q = grp.id; q < rings; q += groups)
      p.counters.nvl_read[drains[q].ring] = drains[q].start + drains[q].rows;
}

__global__ void __launch_bounds__(k_threads) ring_dispatch_kernel(RingDispatchParams p) {
  ring::run_roles(p, sender, forwarder, receiver);
}

}  // namespace

cudaError_t launch_ring_dispatch(const RingDispatchParams& p, cudaStream_t stream) {
  const RingShape& s = p.shape;
  if (!s.launchable(p.leg) || p.format.pitch > s.slot_pitch || p.format.pitch % 16 != 0 ||
      p.format.x_bytes % 16 != 0 || (p.format.num_topk > 32))
    return cudaErrorInvalidValue;
  ring_dispatch_kernel<<<3 * s.channels, k_threads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
