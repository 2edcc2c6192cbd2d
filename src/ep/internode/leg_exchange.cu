// One exchange over the device-driven network leg (kernels.h,
// LegExchangeParams): a block per other node of the rail. Its thread 0 says
// this rank is ready for the exchange, waits until the node is, posts the
// puts, waits for the node's and flushes its own. Ready first: the receive
// regions of this kind are free once this kernel runs (the stream ordered
// their last reader before it), and a sender must not write them before
// then; NCCL's matched send/recv gave that for free, one-sided puts do not.
#include "ep/core/ep_device.cuh"
#include "ep/internode/kernels.h"
#include "ep/network_leg/device_calls.h"
#include "ep/network_leg/device_moves.cuh"

namespace epkit::ep::kernels {
namespace {

namespace nl = network_leg;

constexpr int k_threads = 1024;

// The mailbox's value: what was waited for (low byte), the value the
// signal had reached and the value wanted (so the error says how far the
// peer got: a put that never landed, a signal never sent).
__device__ void give_up(const LegExchangeParams& p, int peer, std::int64_t what,
                        std::uint64_t seen = 0, std::uint64_t wanted = 0) {
  // A rank whose process exited is the one to name: the peer this wait was
  // on, if alive, may be stuck behind it (DeviceLeg::exited).
  if (const int gone = nl::leg_exited(p.leg); gone >= 0) {
    peer = gone;
    what |= k_leg_wait_exited;
  }
  fail_network_wait(p.mailbox, peer, what, seen, wanted);
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

// A bounded wait by one thread until this rank's own kernel has written a
// chunk's rows (LegPut::done).
__device__ bool written(const std::int32_t* done, std::int32_t want, std::int64_t timeout_ns) {
  const std::uint64_t start = global_timer_ns();
  while (load_acquire_gpu(done) < want)
    if (global_timer_ns() - start > static_cast<std::uint64_t>(timeout_ns)) return false;
  return true;
}

// A producer-moved put posted and not yet copied.
// Plain fields: it lives in shared memory, which takes no initialisers.
struct Pending {
  std::uint64_t ticket;
  std::uint8_t* dst;
  const std::uint8_t* src;
  std::uint64_t bytes;
  std::uint32_t signal;
  int live;
};

// Block n exchanges with node n (the own node's block only counts itself
// in). Thread 0 posts and waits. On a leg whose producers move the bytes the
// whole block copies each put, and put i + 1 is posted before put i is
// copied: the pacing model then sees a queue, as a NIC with requests queued
// does, and a grant's round trip to the host hides behind the previous copy.
// (One warp a put, posting the next only after its copy, moved about
// 4.9 GB/s: docs/ep-internode.md.)
__global__ void __launch_bounds__(k_threads) leg_exchange_kernel(LegExchangeParams p) {
  const int n = static_cast<int>(blockIdx.x);
  const int t = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  // This exchange's number, from the kind's count on the device (a graph
  // replay gets the next one).
  __shared__ std::uint64_t number;
  __shared__ int ok;
  __shared__ int land_first;
  __shared__ Pending pending;
  if (t == 0) {
    number = p.counters[0] + 1;
    ok = 1;
    pending.live = 0;
  }
  __syncthreads();
  const bool moved = p.leg.grants != nullptr;
  const int peer = n * p.ranks_per_node + p.local_rank;
  const auto from = static_cast<std::uint32_t>(n);
  const auto mine = static_cast<std::uint32_t>(p.node);
  // The pending put, by the whole block: its grant, its bytes, its signal.
  // False on every thread when the grant never came.
  auto land_pending = [&]() {
    if (t == 0 && !nl::granted(p.leg, pending.ticket, p.timeout_ns)) {
      give_up(p, peer, 1);
      ok = 0;
    }
    __syncthreads();
    if (ok == 0) return false;
    nl::moves::copy(pending.dst, pending.src, pending.bytes, t, threads);
    __threadfence_system();
    __syncthreads();
    if (t == 0) {
      nl::land_signal(p.leg, peer, nl::SignalId{pending.signal}, 1);
      pending.live = 0;
    }
    __syncthreads();
    return true;
  };
  if (n != p.node) {
    // Every node's count message gets the rows of every bucket before any
    // leaves (each block writes the same values, then posts its own).
    if (p.messages != nullptr) {
      const MessageFormat& f = p.message_format;
      for (int i = t; i < p.num_nodes * p.num_nodes; i += threads) {
        const int dst = i / p.num_nodes;
        const int of = i % p.num_nodes;
        p.messages[static_cast<std::int64_t>(dst) * p.message_ints + f.rows_vector_at() + of] =
            p.messages[static_cast<std::int64_t>(of) * p.message_ints + f.rows_at()];
      }
      // Whoever copies reads them after the request (a peer's block, or
      // the host's proxy).
      __threadfence_system();
      __syncthreads();
    }
    // Thread 0 posts a put or bare signal at once (on a moved leg: granted,
    // and its signal added, without bytes to copy).
    auto post_now = [&](const nl::PutRequest& r, nl::FlushMark* mark) {
      if (!moved)
        return r.bytes == 0
                   ? nl::leg_signal(p.leg, r.peer, r.signal, r.signal_add, p.timeout_ns)
                   : nl::leg_put(p.leg, r.peer, r.dst_window, r.dst_offset, r.src_window,
                                 r.src_offset, r.bytes, r.signal, r.signal_add, p.timeout_ns, mark);
      const nl::MovedPut m = nl::post_moved(p.leg, r, p.timeout_ns);
      if (m.status != nl::PostStatus::posted) return m.status;
      if (!nl::granted(p.leg, m.ticket, p.timeout_ns)) return nl::PostStatus::timed_out;
      nl::land_signal(p.leg, r.peer, r.signal, r.signal_add);
      return nl::PostStatus::posted;
    };
    if (t == 0) {
      const nl::PutRequest ready{peer, 0, {}, {}, 0, 0, 0, nl::SignalId{p.ready_signal + mine}, 1};
      if (post_now(ready, nullptr) != nl::PostStatus::posted ||
          !nl::leg_wait(p.leg, nl::SignalId{p.ready_signal + from}, number, p.timeout_ns, peer)) {
        give_up(p, peer, 0, signal_now(p, p.ready_signal + from), number);
        ok = 0;
      }
    }
    __syncthreads();
    if (ok == 0) return;
    // Every put carries its own signal (one of no bytes goes as a bare
    // signal): the leg may complete puts out of order, and a signal orders
    // only its own put's bytes; the other side waits on each chunk's.
    nl::FlushMark mark;
    for (int i = 0; i < p.num_puts; ++i) {
      std::int32_t want = 0;
      const LegPut put = put_for(p.puts[i], n, want);
      std::int32_t* done = put.done != nullptr ? put.done + n * put.chunks + put.chunk : nullptr;
      // A chunk this rank has not written yet: the put before it crosses
      // while it is written.
      if (t == 0)
        land_first = pending.live != 0 && done != nullptr && load_acquire_gpu(done) < want;
      __syncthreads();
      if (land_first != 0 && !land_pending()) return;
      const auto signal =
          p.tail_signal + mine * LegExchangeParams::k_puts + static_cast<std::uint32_t>(i);
      const nl::PutRequest r{peer,
                             0,
                             nl::WindowId{put.dst_window},
                             nl::WindowId{put.src_window},
                             put.dst_offset,
                             put.src_offset,
                             put.bytes,
                             nl::SignalId{signal},
                             1};
      __shared__ Pending next;
      if (t == 0) {
        next.live = 0;
        if (done != nullptr && !written(done, want, p.timeout_ns)) {
          fail(p.mailbox, k_timeout_local, p.node * p.ranks_per_node + p.local_rank, 0);
          ok = 0;
        } else if (!moved || put.bytes == 0) {
          if (post_now(r, &mark) != nl::PostStatus::posted) {
            give_up(p, peer, 1);
            ok = 0;
          }
        } else {
          const nl::MovedPut m = nl::post_moved(p.leg, r, p.timeout_ns);
          next = Pending{m.ticket, m.dst, m.src, put.bytes, signal, 1};
          if (m.status != nl::PostStatus::posted) {
            give_up(p, peer, 1);
            ok = 0;
          }
        }
        // Counted and posted: the next call's kernel counts from zero (it
        // runs after this exchange, in stream order).
        if (ok != 0 && done != nullptr) *done = 0;
      }
      __syncthreads();
      if (ok == 0) return;
      if (pending.live != 0 && !land_pending()) return;
      if (t == 0 && next.live != 0) pending = next;
      __syncthreads();
    }
    if (pending.live != 0 && !land_pending()) return;
    if (t == 0) {
      for (int i = 0; i < p.num_puts && ok != 0; ++i) {
        const auto signal =
            p.tail_signal + from * LegExchangeParams::k_puts + static_cast<std::uint32_t>(i);
        if (!nl::leg_wait(p.leg, nl::SignalId{signal}, number, p.timeout_ns, peer)) {
          give_up(p, peer, 1, signal_now(p, signal), number);
          ok = 0;
        }
      }
      // The next call may rewrite the sources: they must have been read (a
      // producer that moved its own bytes has read them already).
      if (ok != 0 && mark.end > 0 &&
          nl::leg_flush(p.leg, mark, p.timeout_ns) != nl::PostStatus::posted) {
        give_up(p, peer, 2);
        ok = 0;
      }
    }
    __syncthreads();
    if (ok == 0) return;
  }
  // The last block to finish (a wait that expired trapped instead) moves
  // the kind's count on: the next exchange numbers from here. Every block
  // read it above, before it counted itself in.
  if (t == 0) {
    __threadfence();
    auto* arrived = reinterpret_cast<unsigned long long*>(p.counters + 1);
    if (atomicAdd(arrived, 1ull) == gridDim.x - 1) {
      *arrived = 0;
      p.counters[0] = number;
      __threadfence();
    }
  }
}

}  // namespace

cudaError_t launch_leg_exchange(const LegExchangeParams& p, cudaStream_t stream) {
  if (p.num_nodes < 1 || p.num_nodes > k_max_nodes || p.num_puts < 0 ||
      p.num_puts > LegExchangeParams::k_puts || p.counters == nullptr)
    return cudaErrorInvalidValue;
  leg_exchange_kernel<<<p.num_nodes, k_threads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
