// Ring mode's count phase (ring_kernels.h, RingNotifyParams): one block.
// It counts this rank's rows per (destination rank, channel) and per
// (destination node, channel), numbers each token's row in every node's
// stream, puts one message to every rank (its own by a local copy), waits
// for every rank's, checks each as hostile and derives what the dispatch's
// roles and the handle need, all on the device: the host reads only the
// total, and only for a dispatch that sizes its outputs.
#include "ep/internode/channel_plan.h"
#include "ep/internode/leg_counts.h"
#include "ep/internode/ring_device.cuh"
#include "ep/internode/ring_messages.h"

namespace epkit::ep::kernels {
namespace {

constexpr int k_threads = 1024;

__device__ void bad_message(Mailbox* mailbox, int sender, int kind, int index, int value) {
  LegMessageFault f;
  f.kind = kind;
  f.index = index;
  f.value = value;
  fail(mailbox, k_bad_leg_message, sender, pack_leg_fault(f));
}

__global__ void __launch_bounds__(k_threads) ring_notify_kernel(RingNotifyParams p) {
  const RingShape& s = p.shape;
  const int R = s.ranks();
  const int C = s.channels;
  const int N = s.nodes;
  const int G = s.per_node;
  const int me = s.rank();
  const int tid = static_cast<int>(threadIdx.x);
  const ChannelSplit split{p.num_tokens, C};
  __shared__ int rows[k_max_global_ranks * k_ring_max_channels];  // [dest][c]
  __shared__ int node_rows[k_max_nodes * k_ring_max_channels];    // [node][c]
  __shared__ int tile_total;
  __shared__ std::uint64_t number;
  __shared__ long long total;
  for (int i = tid; i < R * C; i += k_threads) rows[i] = 0;
  for (int i = tid; i < N * C; i += k_threads) node_rows[i] = 0;
  if (tid == 0) number = *p.counters.phase + 1;
  __syncthreads();

  // Each token's row in every node's stream (token order over all
  // channels: a channel's rows start at chan_first), and the counts.
  for (int m = 0; m < N; ++m) {
    int carry = 0;
    for (int start = 0; start < p.num_tokens; start += k_threads) {
      const int t = start + tid;
      int any = 0;
      if (t < p.num_tokens) {
        const int c = channel_of(split, t);
        for (int g = 0; g < G; ++g) {
          if (p.is_token_in_rank[t * p.in_rank_stride + m * G + g]) {
            atomicAdd(&rows[(m * G + g) * C + c], 1);
            any = 1;
          }
        }
        if (any) atomicAdd(&node_rows[m * C + c], 1);
      }
      const int before = block_exclusive_scan(any);
      if (tid == k_threads - 1) tile_total = before + any;
      if (t < p.num_tokens)
        p.routes.send_row[static_cast<std::int64_t>(t) * N + m] = any ? carry + before : -1;
      __syncthreads();
      carry += tile_total;
      __syncthreads();
    }
  }
  if (tid < N) {
    int at = 0;
    for (int c = 0; c < C; ++c) {
      p.routes.chan_first[c * N + tid] = at;
      at += node_rows[tid * C + c];
    }
    p.routes.chan_first[C * N + tid] = at;
  }

  // The messages, then one put each (every lane of a warp calls put).
  const int ints = s.message_ints;
  for (int i = tid; i < R * ints; i += k_threads) {
    const int d = i / ints;
    const int f = i % ints;
    const int m = d / G;
    std::int32_t v = 0;
    if (f == 0 || f == ints - 1)
      v = static_cast<std::int32_t>(number);
    else if (f < s.msg_node_rows(0))
      v = rows[d * C + (f - s.msg_rows(0))];
    else if (f < s.msg_experts(0))
      v = node_rows[m * C + (f - s.msg_node_rows(0))];
    else if (f - s.msg_experts(0) < s.experts_per_rank)
      v = p.num_tokens_per_expert[d * s.experts_per_rank + (f - s.msg_experts(0))];
    reinterpret_cast<std::int32_t*>(p.window + s.message_out(d))[f] = v;
  }
  __threadfence_system();
  __syncthreads();
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const auto bytes = static_cast<std::uint64_t>(ints) * 4;
  const int phase = static_cast<int>(number & 1);
  for (int d = warp; d < R; d += k_threads / 32) {
    if (d == me) {
      for (int f = lane; f < ints; f += 32)
        reinterpret_cast<std::int32_t*>(p.window + s.message_in(phase, me))[f] =
            reinterpret_cast<const std::int32_t*>(p.window + s.message_out(me))[f];
      __syncwarp();
      if (lane == 0) ring::add_local(p.leg, s.message_signal(me), 1);
      __syncwarp();
    } else {
      ring::put(p.leg, d, s.message_in(phase, me), s.message_out(d), bytes, s.message_signal(me), 1,
                p.timeout_ns, p.mailbox);
    }
  }

  // Every rank's message for this phase, checked before any count is used.
  for (int src = tid; src < R; src += k_threads) {
    ring::wait_signal(p.leg, s.message_signal(src), number, p.timeout_ns, src, k_ring_wait_message,
                      p.mailbox);
    const std::int32_t* msg =
        reinterpret_cast<const std::int32_t*>(p.window + s.message_in(phase, src));
    const LegMessageFault f = check_ring_message(msg, s, static_cast<std::int32_t>(number));
    if (f.kind != LegMessageFault::none) fail(p.mailbox, k_bad_leg_message, src, pack_leg_fault(f));
    for (int c = 0; c < C; ++c) p.routes.from_rank[src * C + c] = msg[s.msg_rows(c)];
  }
  __syncthreads();

  // Derived: the receiver's bases, the forwarder's streams, the experts.
  if (tid == 0) {
    const long long bound =
        p.num_worst_tokens > 0 ? p.num_worst_tokens : static_cast<long long>(R) * s.max_tokens;
    if (!receive_bases(p.routes.from_rank, R, C, bound, p.routes.base)) {
      // Name the first source whose rows pass the bound.
      long long at = 0;
      for (int src = 0; src < R; ++src) {
        for (int c = 0; c < C; ++c) at += p.routes.from_rank[src * C + c];
        if (at > bound)
          bad_message(p.mailbox, src, LegMessageFault::total_rows, 0, static_cast<int>(at));
      }
    }
    total = p.routes.base[R * C];
    int acc = 0;
    for (int src = 0; src < R; ++src) {
      for (int c = 0; c < C; ++c) acc += p.routes.from_rank[src * C + c];
      p.routes.gbl_prefix[src] = acc;
    }
  }
  if (tid < N) {
    const int n = tid;
    const std::int32_t* msg =
        reinterpret_cast<const std::int32_t*>(p.window + s.message_in(phase, n * G + s.local));
    // Checked above: each channel's stream in 0..max_tokens; their sum too
    // (the masks of a source node's streams take max_tokens bytes).
    int at = 0;
    for (int c = 0; c < C; ++c) {
      const int r = msg[s.msg_node_rows(c)];
      p.routes.stream[c * N + n] = r;
      p.routes.stream_first[c * N + n] = at;
      at += r;
    }
    p.routes.stream_first[C * N + n] = at;
  }
  for (int e = tid; e < s.experts_per_rank; e += k_threads) {
    long long sum = 0;
    for (int src = 0; src < R; ++src)
      sum += reinterpret_cast<const std::int32_t*>(p.window +
                                                   s.message_in(phase, src))[s.msg_experts(e)];
    const int a = max(p.expert_alignment, 1);
    const int aligned = static_cast<int>((sum + a - 1) / a * a);
    p.routes.per_expert[e] = aligned;
    if (p.recv_tokens_per_expert != nullptr) p.recv_tokens_per_expert[e] = aligned;
    if (p.host_totals != nullptr) p.host_totals[2 + e] = aligned;
  }
  __syncthreads();
  if (tid == 0) {
    *p.counters.phase = number;
    if (p.host_totals != nullptr) {
      p.host_totals[0] = static_cast<std::int32_t>(total);
      __threadfence_system();
      p.host_totals[1] = static_cast<std::int32_t>(number);
      __threadfence_system();
    }
  }
}

// One thread: a peer whose process exited stops this call before its rings
// wait on it (they would name it too, after the timeout).
__global__ void ring_notify_alive_kernel(network_leg::DeviceLeg leg, Mailbox* mailbox) {
  if (threadIdx.x != 0) return;
  if (const int gone = network_leg::leg_exited(leg); gone >= 0)
    ring::give_up(leg, mailbox, gone, k_ring_wait_message, 0, 0);
}

}  // namespace

cudaError_t launch_ring_notify_alive(const network_leg::DeviceLeg& leg, Mailbox* mailbox,
                                     cudaStream_t stream) {
  ring_notify_alive_kernel<<<1, 32, 0, stream>>>(leg, mailbox);
  return cudaGetLastError();
}

cudaError_t launch_ring_notify(const RingNotifyParams& p, cudaStream_t stream) {
  const RingShape& s = p.shape;
  if (!s.launchable(p.leg) ||
      s.message_ints < RingShape::min_message_ints(s.channels, s.experts_per_rank))
    return cudaErrorInvalidValue;
  ring_notify_kernel<<<1, k_threads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
