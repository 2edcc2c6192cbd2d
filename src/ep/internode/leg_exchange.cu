// One exchange over the device-driven network leg (kernels.h,
// LegExchangeParams): a warp per other node of the rail. Each warp's lane 0
// says this rank is ready for the exchange, waits until the node is, puts,
// waits for the node's rows and flushes its own puts. Ready first: the
// receive regions of this kind are free once this kernel runs (the stream
// ordered their last reader before it), and a sender must not write them
// before then; NCCL's matched send/recv gave that for free, one-sided puts
// do not.
#include "ep/core/ep_device.cuh"
#include "ep/internode/kernels.h"
#include "ep/network_leg/device_calls.h"
#include "ep/network_leg/device_moves.cuh"

namespace epkit::ep::kernels {
namespace {

namespace nl = network_leg;

constexpr int k_warps = 8;

// The mailbox's value: what was waited for (low byte), the value the
// signal had reached and the value wanted (so the error says how far the
// peer got: a put that never landed, a signal never sent).
__device__ void give_up(const LegExchangeParams& p, int peer, std::int64_t what,
                        std::uint64_t seen = 0, std::uint64_t wanted = 0) {
  const auto clip = [](std::uint64_t v) { return static_cast<std::int64_t>(v & 0xfffffff); };
  fail(p.mailbox, k_timeout_network, peer, what | clip(seen) << 8 | clip(wanted) << 36);
}

__device__ std::uint64_t signal_now(const LegExchangeParams& p, std::uint32_t signal) {
  return nl::shim::load_acquire(p.leg.signals + signal);
}

// Put i of the exchange for node n, its device-side sizes applied
// (LegPut): the counts were checked on the device before (leg_counts.cu), so
// every offset stays in its region. `want`: the rows this rank's kernel must
// have written before the put may leave (LegPut::done), else 0.
__device__ LegPut put_for(const LegPut& rule, int n, std::int32_t& want) {
  LegPut put = rule;
  put.src_offset += static_cast<std::uint64_t>(n) * rule.src_node_stride;
  want = 0;
  if (rule.rows == nullptr) return put;
  int first = 0;
  int rows = rule.rows[n];
  if (rule.chunks > 0) {
    first = chunk_begin(rule.chunk, rows, rule.chunks);
    rows = chunk_begin(rule.chunk + 1, rows, rule.chunks) - first;
  }
  const auto at = [&](const std::int32_t* row) {
    return static_cast<std::uint64_t>((row != nullptr ? row[n] : 0) + first) * rule.row_bytes;
  };
  put.bytes = static_cast<std::uint64_t>(rows) * rule.row_bytes;
  put.src_offset += at(rule.src_row);
  put.dst_offset += at(rule.dst_row);
  if (rule.done != nullptr) want = rows;
  return put;
}

__global__ void __launch_bounds__(k_warps * 32) leg_exchange_kernel(LegExchangeParams p) {
  // This exchange's number, from the kind's count on the device (a graph
  // replay gets the next one).
  __shared__ std::uint64_t number;
  if (threadIdx.x == 0) number = p.number_preset ? p.counters[0] : p.counters[0] + 1;
  __syncthreads();
  // Every node's count message gets the rows of every bucket before any
  // leaves (block-wide, then the warps post).
  if (p.messages != nullptr) {
    const MessageFormat& f = p.message_format;
    for (int i = threadIdx.x; i < p.num_nodes * p.num_nodes; i += blockDim.x) {
      const int dst = i / p.num_nodes;
      const int of = i % p.num_nodes;
      p.messages[static_cast<std::int64_t>(dst) * p.message_ints + f.rows_vector_at() + of] =
          p.messages[static_cast<std::int64_t>(of) * p.message_ints + f.rows_at()];
    }
    // The proxy's copy engine reads them after it sees the request.
    __threadfence_system();
    __syncthreads();
  }
  const int lane = threadIdx.x % 32;
  const bool moved = p.leg.grants != nullptr;
  // A bare signal or a put: by the whole warp where the producer moves the
  // bytes, else lane 0 posts it for the host to move.
  auto post = [&](int peer, const LegPut* put, std::uint32_t signal, nl::FlushMark* mark) {
    const std::uint64_t bytes = put != nullptr ? put->bytes : 0;
    if (moved) {
      return bytes == 0
                 ? nl::leg_signal_moved(p.leg, peer, nl::SignalId{signal}, 1, p.timeout_ns)
                 : nl::leg_put_moved(p.leg, peer, nl::WindowId{put->dst_window}, put->dst_offset,
                                     nl::WindowId{put->src_window}, put->src_offset, bytes,
                                     nl::SignalId{signal}, 1, p.timeout_ns);
    }
    auto status = static_cast<std::uint32_t>(nl::PostStatus::posted);
    if (lane == 0) {
      status = static_cast<std::uint32_t>(
          bytes == 0 ? nl::leg_signal(p.leg, peer, nl::SignalId{signal}, 1, p.timeout_ns)
                     : nl::leg_put(p.leg, peer, nl::WindowId{put->dst_window}, put->dst_offset,
                                   nl::WindowId{put->src_window}, put->src_offset, bytes,
                                   nl::SignalId{signal}, 1, p.timeout_ns, mark));
    }
    return static_cast<nl::PostStatus>(__shfl_sync(0xffffffffu, status, 0));
  };
  // A bounded wait by lane 0, its outcome for the warp.
  auto wait = [&](std::uint32_t signal, std::uint64_t value) {
    int met = 1;
    if (lane == 0) met = nl::leg_wait(p.leg, nl::SignalId{signal}, value, p.timeout_ns) ? 1 : 0;
    return __shfl_sync(0xffffffffu, met, 0) != 0;
  };
  // Lane 0 waits until this rank's own kernel has written a chunk's rows.
  auto written = [&](const std::int32_t* done, std::int32_t want) {
    int met = 1;
    if (lane == 0) {
      const std::uint64_t start = global_timer_ns();
      while (load_acquire_gpu(done) < want)
        if (global_timer_ns() - start > static_cast<std::uint64_t>(p.timeout_ns)) {
          met = 0;
          break;
        }
    }
    return __shfl_sync(0xffffffffu, met, 0) != 0;
  };
  for (int n = threadIdx.x / 32; n < p.num_nodes; n += k_warps) {
    if (n == p.node) continue;
    const int peer = n * p.ranks_per_node + p.local_rank;
    const auto from = static_cast<std::uint32_t>(n);
    const auto mine = static_cast<std::uint32_t>(p.node);
    if (post(peer, nullptr, p.ready_signal + mine, nullptr) != nl::PostStatus::posted ||
        !wait(p.ready_signal + from, number)) {
      if (lane == 0) give_up(p, peer, 0, signal_now(p, p.ready_signal + from), number);
      return;
    }
    // Every put carries its own signal (one of no bytes goes as a bare
    // signal): the leg may complete puts out of order, and a signal orders
    // only its own put's bytes; the other side waits on each chunk's.
    nl::FlushMark mark;
    for (int i = 0; i < p.num_puts; ++i) {
      std::int32_t want = 0;
      const LegPut put = put_for(p.puts[i], n, want);
      std::int32_t* done = put.done != nullptr ? put.done + n * put.chunks + put.chunk : nullptr;
      if (done != nullptr && !written(done, want)) {
        if (lane == 0)
          fail(p.mailbox, k_timeout_local, p.node * p.ranks_per_node + p.local_rank, 0);
        return;
      }
      const auto signal =
          p.tail_signal + mine * LegExchangeParams::k_puts + static_cast<std::uint32_t>(i);
      if (post(peer, &put, signal, &mark) != nl::PostStatus::posted) {
        if (lane == 0) give_up(p, peer, 1);
        return;
      }
      // Counted and gone: the next call's kernel counts from zero (it runs
      // after this exchange, in stream order).
      if (done != nullptr && lane == 0) *done = 0;
    }
    for (int i = 0; i < p.num_puts; ++i) {
      const auto signal =
          p.tail_signal + from * LegExchangeParams::k_puts + static_cast<std::uint32_t>(i);
      if (!wait(signal, number)) {
        if (lane == 0) give_up(p, peer, 1, signal_now(p, signal), number);
        return;
      }
    }
    // The next call may rewrite the sources: they must have been read (a
    // producer that moved its own bytes has read them already).
    if (lane == 0 && mark.end > 0 &&
        nl::leg_flush(p.leg, mark, p.timeout_ns) != nl::PostStatus::posted) {
      give_up(p, peer, 2);
      return;
    }
    __syncwarp();
  }
  // Every warp done (a wait that expired trapped instead): the next
  // exchange of this kind counts from here.
  __syncthreads();
  if (threadIdx.x == 0 && !p.number_preset) p.counters[0] = number;
}

}  // namespace

cudaError_t launch_leg_exchange(const LegExchangeParams& p, cudaStream_t stream) {
  if (p.num_nodes < 1 || p.num_nodes > k_max_nodes || p.num_puts < 0 ||
      p.num_puts > LegExchangeParams::k_puts || p.counters == nullptr)
    return cudaErrorInvalidValue;
  leg_exchange_kernel<<<1, k_warps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
