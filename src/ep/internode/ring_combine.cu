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
// Rows an NVLink sender writes into one sub-ring before it publishes them.
constexpr int k_publish_rows = 32;
using Ctx = ring::Role<RingCombineParams>;

__device__ void nvl_sender(const Ctx& x) {
  const RingCombineParams& p = x.p;
  const RingShape& s = x.s;
  const int c = x.c;
  const int N = s.nodes;
  const int G = s.per_node;
  const int S = s.nvl_slots;
  const int lane = threadIdx.x & 31;
  // Every sub-ring this rank feeds in the channel, by a group of warps
  // each (rings q, q + groups, ...); the group's warps write a row each.
  __shared__ ring::SubRing feeds[k_max_global_ranks];
  __shared__ ring::Seen seen[k_warps][2];
  const int rings = G * N;
  ring::fill_sub_rings(p, s, c, feeds, [&](int ring) { return p.counters.nvl_written[ring]; });
  const int groups = ring::polling_groups(rings);
  const ring::Group grp = ring::group_of(groups, k_warps);
  if (grp.id >= groups) return;
  const std::uint64_t* heads =
      reinterpret_cast<const std::uint64_t*>(p.nvl[s.local] + s.nvl_heads());
  const int x_bytes = p.hidden * 2;
  std::uint64_t since = global_timer_ns();
  ring::Backoff backoff;
  int turn = 0;
  for (;;) {
    bool pending = false;
    bool moved = false;
    for (int q = grp.id; q < rings; q += groups) {
      ring::SubRing& r = feeds[q];
      const ring::Seen at = ring::look(grp, seen[grp.id], turn, r, heads);
      const std::uint64_t head = at.at;
      const int done = at.done;
      if (done >= r.rows) continue;
      pending = true;
      // Rows up to head + S may be written.
      const std::uint64_t room_to = head + S;
      if (r.start + done >= room_to) continue;
      // At most k_publish_rows before the tail moves: a forwarder waits
      // for a chunk's first rows, and at a call's start the room is the
      // whole sub-ring (publishing 256 rows at once held every forwarder's
      // first put back by milliseconds at 4 nodes).
      const int upto = static_cast<int>(
          min(static_cast<std::uint64_t>(min(r.rows, done + k_publish_rows)), room_to - r.start));
      const int at_forwarder = s.sub_ring(c, s.local, r.n);
      for (int k = done + grp.index; k < upto; k += grp.size) {
        const std::int64_t in = r.first + k;
        std::uint8_t* dst = p.nvl[r.other] + s.nvl_slot(at_forwarder, r.start + k);
        ring::warp_copy(dst, reinterpret_cast<const std::uint8_t*>(p.x + in * p.x_stride), x_bytes);
        if (lane < p.num_topk)
          reinterpret_cast<float*>(dst + x_bytes)[lane] = p.weights[in * p.weights_stride + lane];
      }
      moved = true;
      __threadfence_system();
      grp.sync();
      if (grp.lead()) {
        r.done = upto;
        store_release_sys(
            reinterpret_cast<std::uint64_t*>(p.nvl[r.other] + s.nvl_tails()) + at_forwarder,
            r.start + upto);
      }
    }
    if (!pending) break;
    const std::uint64_t now = global_timer_ns();
    if (moved && grp.lead() && now > since + 1000)
      ring::profile_add(p.profile, ring::k_profile_nvl, since);
    ring::end_round(p.leg, p.mailbox, s, grp, groups, feeds, moved, now, since, backoff,
                    p.nvl_timeout_ns, k_ring_wait_nvl_room);
  }
  if (grp.lead())
    for (int q = grp.id; q < rings; q += groups)
      p.counters.nvl_written[feeds[q].ring] = feeds[q].start + feeds[q].rows;
}

__device__ void forwarder(const Ctx& x) {
  const RingCombineParams& p = x.p;
  const RingShape& s = x.s;
  const int c = x.c;
  const int N = s.nodes;
  const int G = s.per_node;
  const int K = s.chunk_rows;
  const int NC = s.net_chunks;
  const int S = s.nvl_slots;
  const int lane = threadIdx.x & 31;
  // A group of warps per source node: each warp sums a row of the chunk at
  // a time; the group puts the chunk.
  const ring::Group grp = ring::group_of(N, k_warps);
  __shared__ unsigned long long put_ends[k_warps][3];
  if (grp.id >= N) return;
  const int n = grp.id;
  const int rows = p.routes.stream[c * N + n];
  const int first = p.routes.stream_first[c * N + n];
  const std::uint64_t base = p.counters.net_sent[c * N + n];
  const int peer = n * G + s.local;
  // Rows read from each local rank's sub-ring before this chunk (every warp
  // of the group keeps the same count).
  std::uint64_t read[k_max_ranks];
#pragma unroll
  for (int g = 0; g < k_max_ranks; ++g)
    read[g] = g < G ? p.counters.nvl_read[s.sub_ring(c, g, n)] : 0;
  const std::uint64_t* tails =
      reinterpret_cast<const std::uint64_t*>(p.nvl[s.local] + s.nvl_tails());
  const int x_bytes = p.hidden * 2;
  const int n8 = p.hidden >> 3;
  // As the dispatch's forwarder: a wave never takes more rows of a rank
  // than its sub-ring holds, so its sender waits for room only behind rows
  // whose heads an earlier wave published.
  const int wave = min(grp.size, S);
  // The chunk put last and not yet finished (the leader's; the flag is the
  // group's): the leg carries it while the group sums the next. One, not
  // more: two in flight a group measured slower at 4 nodes in one call (each group's
  // puts then queue behind more of the other groups' on the rank's NIC).
  ring::PostedPut pending;
  bool has_pending = false;
  const auto finish = [&](const ring::PostedPut& put) {
    const std::uint64_t t0 = ring::stamp(p.profile);
    ring::group_finish(p.leg, grp, put_ends[grp.id], put, p.timeout_ns, p.mailbox, p.profile);
    if (grp.lead()) ring::profile_add(p.profile, ring::k_profile_put, t0);
  };
  for (int j0 = 0; j0 < rows; j0 += K) {
    const std::uint64_t msg = base + j0 / K;
    const int in_chunk = min(K, rows - j0);
    if (grp.lead() && msg >= static_cast<std::uint64_t>(NC)) {
      const std::uint64_t t0 = ring::stamp(p.profile);
      ring::wait_signal(p.leg, s.credit_signal(c, n), msg + 1 - NC, p.timeout_ns, peer,
                        k_ring_wait_credit, p.mailbox);
      ring::profile_add(p.profile, ring::k_profile_credit, t0);
    }
    grp.sync();
    const std::uint64_t slot = n == s.node ? s.recv_slot(c, s.node, msg) : s.send_slot(c, n, msg);
    std::uint8_t* chunk = p.window + slot;
    // Row `lane`'s local ranks (0 past the chunk).
    const int mask =
        lane < in_chunk
            ? p.routes.mask[static_cast<std::int64_t>(n) * s.max_tokens + first + j0 + lane]
            : 0;
    for (int r0 = 0; r0 < in_chunk; r0 += wave) {
      const int r = r0 + grp.index;
      if (grp.index < wave && r < in_chunk) {
        const int mk = __shfl_sync(0xffffffffu, mask, r);
        // Each copy's slot: after the rows before it in this chunk.
        const std::uint8_t* copy[k_max_ranks] = {};
        const std::uint64_t t0 = ring::stamp(p.profile);
#pragma unroll
        for (int g = 0; g < k_max_ranks; ++g) {
          const unsigned before = __ballot_sync(0xffffffffu, lane < r && (mask >> g & 1) != 0);
          if (g >= G || (mk >> g & 1) == 0) continue;
          const std::uint64_t idx = read[g] + __popc(before);
          // Every copy of the row is here first (bounded), then the sums.
          if (lane == 0)
            ring::wait_word(p.leg, tails + s.sub_ring(c, g, n), idx + 1, p.nvl_timeout_ns,
                            s.node * G + g, k_ring_wait_nvl_rows, p.mailbox);
          copy[g] = p.nvl[s.local] + s.nvl_slot(s.sub_ring(c, g, n), idx);
        }
        if (lane == 0) ring::profile_add(p.profile, ring::k_profile_nvl, t0);
        __syncwarp();
        std::uint8_t* out = chunk + static_cast<std::int64_t>(r) * p.row_bytes;
        for (int i = lane; i < n8; i += 32) {
          float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
          for (int g = 0; g < k_max_ranks; ++g)
            if (copy[g] != nullptr)
              add_bf16x8(acc, __ldcg(reinterpret_cast<const int4*>(copy[g]) + i));
          reinterpret_cast<int4*>(out)[i] = pack_bf16x8(acc);
        }
        if (lane < p.num_topk) {
          float acc = 0.0f;
#pragma unroll
          for (int g = 0; g < k_max_ranks; ++g)
            if (copy[g] != nullptr)
              acc = acc + __ldcg(reinterpret_cast<const float*>(copy[g] + x_bytes) + lane);
          reinterpret_cast<float*>(out + x_bytes)[lane] = acc;
        }
        __threadfence_system();
      }
      grp.sync();
      // The wave's copies are read: their slots go back to their ranks.
      const int upto = min(r0 + wave, in_chunk);
      const unsigned below = upto >= 32 ? 0xffffffffu : (1u << upto) - 1u;
      const unsigned in_wave = below & ~((1u << r0) - 1u);
      for (int g = 0; g < G; ++g) {
        const unsigned with_g = __ballot_sync(0xffffffffu, (mask >> g & 1) != 0);
        if (grp.lead() && (with_g & in_wave) != 0)
          store_release_sys(reinterpret_cast<std::uint64_t*>(p.nvl[g] + s.nvl_heads()) +
                                s.sub_ring(c, s.local, n),
                            ring::pick(read, g) + __popc(with_g & below));
      }
    }
#pragma unroll
    for (int g = 0; g < k_max_ranks; ++g)
      read[g] += __popc(__ballot_sync(0xffffffffu, g < G && (mask >> g & 1) != 0));
    if (n == s.node) {
      if (grp.lead()) ring::add_local(p.leg, s.tail_signal(c, s.node, msg), 1);
    } else {
      // Posted now, finished after the next chunk's sums: the leg carries
      // one chunk while the group sums the next.
      ring::PostedPut posted;
      if (grp.lead())
        posted =
            ring::post_put(p.leg, peer, s.recv_slot(c, s.node, msg), slot,
                           static_cast<std::uint64_t>(in_chunk) * p.row_bytes,
                           s.tail_signal(c, s.node, msg), 1, p.timeout_ns, p.mailbox, p.profile);
      if (has_pending) finish(pending);
      pending = posted;
      has_pending = true;
    }
  }
  if (has_pending) finish(pending);
  if (grp.index != 0) return;
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
  // Credits read in order but not yet returned, per source node: a put per
  // batch, not per chunk (each is a paced put of its own on this rank's
  // NIC, queued behind the data). Batches only in rings deep enough that
  // the chunks held back never stall a sender these receivers wait on.
  __shared__ unsigned owed[k_max_nodes];
  if (threadIdx.x < N) {
    base[threadIdx.x] = p.counters.net_received[c * N + threadIdx.x];
    owed[threadIdx.x] = 0;
  }
  __syncthreads();
  const unsigned batch = NC >= 16 ? static_cast<unsigned>(NC / 4) : 1u;
  const auto send_credits = [&](int m, unsigned credits) {
    if (m == s.node) {
      if (lane == 0) ring::add_local(p.leg, s.credit_signal(c, s.node), credits);
      __syncwarp();
    } else {
      const std::uint64_t t1 = ring::stamp(p.profile);
      ring::put(p.leg, m * s.per_node + s.local, 0, 0, 0, s.credit_signal(c, s.node), credits,
                p.timeout_ns, p.mailbox, p.profile);
      if (lane == 0) ring::profile_add(p.profile, ring::k_profile_put, t1);
    }
  };
  const int x_bytes = p.hidden * 2;
  const int n8 = p.hidden >> 3;
  for (int t = channel_begin(split, c) + warp; t < channel_begin(split, c + 1); t += k_warps) {
    const int my_row = lane < N ? p.routes.send_row[static_cast<std::int64_t>(t) * N + lane] : -1;
    const int j = my_row >= 0 ? my_row - first[lane] : -1;
    const std::uint64_t msg = j >= 0 ? base[lane] + j / K : 0;
    const std::uint64_t t0 = ring::stamp(p.profile);
    if (j >= 0)
      ring::wait_signal(p.leg, s.tail_signal(c, lane, msg), msg / NC + 1, p.timeout_ns,
                        lane * s.per_node + s.local, k_ring_wait_chunk, p.mailbox);
    __syncwarp();
    if (lane == 0) ring::profile_add(p.profile, ring::k_profile_chunk, t0);
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
      unsigned due = 0;
      if (lane == 0 && credits > 0 &&
          atomicAdd(&owed[m], static_cast<unsigned>(credits)) + credits >= batch)
        due = atomicExch(&owed[m], 0u);
      due = __shfl_sync(0xffffffffu, due, 0);
      if (due > 0) send_credits(m, due);
    }
  }
  __syncthreads();
  // What is still owed at the stream's end: a warp a source node.
  if (warp < N && owed[warp] > 0) send_credits(warp, owed[warp]);
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
