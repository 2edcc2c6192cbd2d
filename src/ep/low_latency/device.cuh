// Device pieces the low-latency kernels share: the region's arrays by rank,
// the bounded wait for every source rank's flag, the end of a send (the last
// block sets the flags), and a warp's copy of one row.
#pragma once

#include "ep/core/ep_device.cuh"
#include "ep/low_latency/kernels.h"
#include "ep/network_leg/device_moves.cuh"

namespace epkit::ep::kernels {

__device__ __forceinline__ LowLatencyHeader* low_latency_header(const LowLatencyCommon& c, int r) {
  return reinterpret_cast<LowLatencyHeader*>(c.base[r]);
}

/// An array of this operation's buffer in rank r's region.
template <typename T>
__device__ __forceinline__ T* low_latency_array(const LowLatencyCommon& c, int r,
                                                std::int64_t offset) {
  return reinterpret_cast<T*>(c.base[r] + offset);
}

template <typename T>
__device__ __forceinline__ T load_volatile(const T* p) {
  return *reinterpret_cast<const volatile T*>(p);
}

/// Loads that bypass L1: data other GPUs wrote into this rank's memory is
/// coherent in this GPU's L2 only.
__device__ __forceinline__ int load_cg(const int* p) {
  return __ldcg(p);
}
__device__ __forceinline__ int4 load_cg(const int4* p) {
  return __ldcg(p);
}

/// The epoch of this kernel's operation: the next one for a send, the one
/// its send recorded for a receive-only kernel (a hook). Read by every block
/// at its start, before the last block of the send can advance it.
__device__ __forceinline__ std::uint64_t low_latency_epoch(const LowLatencyCommon& c) {
  const LowLatencyHeader* h = low_latency_header(c, c.rank);
  if (c.phases & k_low_latency_send) return load_volatile(&h->epoch) + 1;
  return load_volatile(&h->op_epoch[c.buffer]);
}

/// Across nodes: which operation of its kind on its buffer this kernel's is
/// (1, 2, ...), the count signal value each source's count put brings (every
/// rank sends every operation). Read by every block at its start, like the
/// epoch; the last block of the send records it (low_latency_send_done).
__device__ __forceinline__ std::uint64_t low_latency_sequence(const LowLatencyCommon& c, int kind) {
  if (!c.net.on) return 0;
  const std::uint64_t sent = load_volatile(&c.net.sent[low_latency_sent_ops(kind, c.buffer)]);
  return (c.phases & k_low_latency_send) ? sent + 1 : sent;
}

/// One thread waits until *flag reaches `epoch` (bounded like every wait).
__device__ __forceinline__ void low_latency_wait_one(const LowLatencyCommon& c,
                                                     const std::uint64_t* flag, std::uint64_t epoch,
                                                     int rank, int what) {
  if (load_acquire_sys(flag) >= epoch) return;
  const std::uint64_t t0 = global_timer_ns();
  while (load_acquire_sys(flag) < epoch)
    if (global_timer_ns() - t0 > c.timeout_ns) fail(c.mailbox, k_timeout_low_latency, rank, what);
}

/// The last index in [0, n) whose prefix `first[index]` is at most `value`
/// (first is non-decreasing, first[0] <= value): which expert, or which
/// source, holds packed row `value`.
__device__ __forceinline__ int low_latency_holder(const int* first, int n, int value) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first[mid] <= value)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/// Whether rank r's region is mapped here (this node: NVLink stores), or the
/// rank is reached through the network leg.
__device__ __forceinline__ bool low_latency_mapped(const LowLatencyCommon& c, int r) {
  return c.base[r] != nullptr;
}

/// Across nodes: a put by the whole calling warp of `bytes` from this rank's
/// region at `src` to rank r's region at `dst`, adding 1 to the receiver's
/// signal `signal` (low_latency_signal). A put the leg refuses or does not
/// carry within the timeout stops the kernel naming r.
__device__ __forceinline__ void low_latency_put(const LowLatencyCommon& c, int r, std::int64_t dst,
                                                std::int64_t src, std::int64_t bytes,
                                                std::uint32_t signal) {
  namespace nl = network_leg;
  const nl::PostStatus status = nl::leg_put_moved(
      c.net.leg, r, c.net.window, static_cast<std::uint64_t>(dst), c.net.window,
      static_cast<std::uint64_t>(src), static_cast<std::uint64_t>(bytes),
      nl::SignalId{c.net.signal_base + signal}, 1, static_cast<std::int64_t>(c.timeout_ns));
  if (status != nl::PostStatus::posted && (threadIdx.x & 31) == 0)
    fail(c.mailbox, k_timeout_low_latency, r, k_low_latency_put);
  __syncwarp();
}

/// Across nodes, one thread: waits until this rank's signal `signal` (past
/// signal_base) reaches `value`, bounded; on expiry names rank r, or the rank
/// whose process exited if the leg saw one (r may be stuck behind it).
__device__ __forceinline__ void low_latency_leg_wait(const LowLatencyCommon& c,
                                                     std::uint32_t signal, std::uint64_t value,
                                                     int r, int what) {
  namespace nl = network_leg;
  if (nl::leg_wait(c.net.leg, nl::SignalId{c.net.signal_base + signal}, value,
                   static_cast<std::int64_t>(c.timeout_ns), r))
    return;
  const int exited = nl::leg_exited(c.net.leg);
  fail(c.mailbox, k_timeout_low_latency, exited >= 0 ? exited : r, what);
}

/// Across nodes, one thread of every block but 0: waits until block 0 has
/// seen every source of this epoch arrive (`ready`); bounded past block 0's
/// own waits, which name the rank first.
__device__ __forceinline__ void low_latency_wait_ready(const LowLatencyCommon& c,
                                                       const std::uint64_t* ready,
                                                       std::uint64_t epoch, int what) {
  if (load_acquire_sys(ready) >= epoch) return;
  const std::uint64_t t0 = global_timer_ns();
  while (load_acquire_sys(ready) < epoch)
    if (global_timer_ns() - t0 > 2 * c.timeout_ns + 1000000000ull)
      fail(c.mailbox, k_timeout_low_latency, c.rank, what);
}

/// Across nodes, block 0 (warp 0, a lane a source): every source of this
/// epoch has arrived: a source of this node by its count words
/// (`arrived(s)` waits), one on another node by its count signal reaching
/// this operation's `sequence`, then its rows signal reaching the running
/// total its count put carries (`arrived(s)` checks the words and returns
/// it): the leg orders a put with its own signal only. Absolute values, so a
/// skipped receive leaves nothing behind. Then block 0 tells the other
/// blocks (`ready`), which wait for that alone.
template <typename Arrived>
__device__ void low_latency_arrivals(const LowLatencyCommon& c, std::uint64_t epoch,
                                     std::uint64_t sequence, int kind, std::uint64_t* ready,
                                     Arrived arrived) {
  const int R = c.num_ranks;
  const int lane = threadIdx.x & 31;
  const int what = kind == k_low_latency_dispatch_kind ? k_low_latency_wait_dispatch
                                                       : k_low_latency_wait_combine;
  if (blockIdx.x != 0) {
    if (threadIdx.x == 0) low_latency_wait_ready(c, ready, epoch, what);
    __syncthreads();
    return;
  }
  if (threadIdx.x < 32) {
    for (int s = lane; s < R; s += 32) {
      const long long start = clock64();
      if (low_latency_mapped(c, s)) {
        arrived(s);
      } else {
        low_latency_leg_wait(c, low_latency_signal(kind, 0, c.buffer, s, R), sequence, s,
                             kind == k_low_latency_dispatch_kind ? k_low_latency_wait_counts
                                                                 : k_low_latency_wait_combine);
        low_latency_leg_wait(c, low_latency_signal(kind, 1, c.buffer, s, R), arrived(s), s, what);
      }
      if (c.wait_stats != nullptr)
        atomicAdd(reinterpret_cast<unsigned long long*>(c.wait_stats + s),
                  static_cast<unsigned long long>(clock64() - start));
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    store_release_sys(ready, epoch);
  }
}

/// Lanes 0..ranks-1 of the calling warp wait until flags[lane] reaches the
/// epoch (bounded by the timeout, which names the rank and the wait), and
/// add the cycles waited to wait_stats when asked.
__device__ __forceinline__ void low_latency_wait_flags(const LowLatencyCommon& c,
                                                       const std::uint64_t* flags,
                                                       std::uint64_t epoch, int what, bool record) {
  const int lane = threadIdx.x & 31;
  if (lane < c.num_ranks) {
    const long long start = clock64();
    low_latency_wait_one(c, flags + lane, epoch, lane, what);
    if (record && c.wait_stats != nullptr)
      atomicAdd(reinterpret_cast<unsigned long long*>(c.wait_stats + lane),
                static_cast<unsigned long long>(clock64() - start));
  }
  __syncwarp();
}

/// The end of a send: each block fences its stores (system scope) and counts
/// itself in; the last one runs `before_flags` with all its threads (the
/// hooked dispatch's count words, the count puts), then sets this rank's
/// flag (dispatch or combine) on every rank to the epoch, and records the
/// epoch (and across nodes the sequence) for the receive half.
template <typename BeforeFlags>
__device__ __forceinline__ void low_latency_send_done(const LowLatencyCommon& c,
                                                      std::uint64_t epoch, std::uint64_t sequence,
                                                      bool combine, BeforeFlags before_flags) {
  __shared__ bool last;
  LowLatencyHeader* mine = low_latency_header(c, c.rank);
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned int done = atomicAdd(&mine->grid_counter, 1u);
    last = done == gridDim.x - 1;
    if (last) mine->grid_counter = 0;  // every other block has counted in
  }
  __syncthreads();
  if (last) {  // the same in every thread of the block
    __threadfence_system();
    before_flags();
    __syncthreads();
  }
  if (last && threadIdx.x < 32) {
    __threadfence_system();
    const int lane = threadIdx.x;
    // Ranks on other nodes learn of the operation from its count puts.
    for (int r = lane; r < c.num_ranks; r += 32) {
      if (!low_latency_mapped(c, r)) continue;
      LowLatencyHeader* peer = low_latency_header(c, r);
      std::uint64_t* flag =
          combine ? &peer->combine_flag[c.buffer][c.rank] : &peer->dispatch_flag[c.buffer][c.rank];
      store_release_sys(flag, epoch);
    }
    if (lane == 0) {
      mine->epoch = epoch;
      mine->op_epoch[c.buffer] = epoch;
      if (!combine) mine->dispatch_epoch[c.buffer] = epoch;
      if (c.net.on)
        c.net.sent[low_latency_sent_ops(
            combine ? k_low_latency_combine_kind : k_low_latency_dispatch_kind, c.buffer)] =
            sequence;
    }
  }
}

__device__ __forceinline__ void low_latency_send_done(const LowLatencyCommon& c,
                                                      std::uint64_t epoch, std::uint64_t sequence,
                                                      bool combine) {
  low_latency_send_done(c, epoch, sequence, combine, [] {});
}

/// Across nodes, one thread of the last block of a send: adds `rows` to this
/// rank's running total of rows put to rank r on this buffer and returns the
/// new total (what r's rows signal reaches once they all landed).
__device__ __forceinline__ std::uint64_t low_latency_add_sent_rows(const LowLatencyCommon& c,
                                                                   int kind, int r,
                                                                   std::uint64_t rows) {
  std::uint64_t& total = c.net.sent[low_latency_sent_rows(kind, c.buffer, r, c.num_ranks)];
  total += rows;
  return total;
}

/// A warp copies n16 16-byte vectors; `Load` reads one. Unroll vectors per
/// lane are in flight at once: a row crosses NVLink latency-bound otherwise.
template <int Unroll, typename Load>
__device__ __forceinline__ void warp_copy(int4* dst, const int4* src, int n16, Load load) {
  const int lane = threadIdx.x & 31;
  for (int first = 0; first < n16; first += 32 * Unroll) {
    int4 v[Unroll];
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      const int i = first + u * 32 + lane;
      if (i < n16) v[u] = load(src + i);
    }
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      const int i = first + u * 32 + lane;
      if (i < n16) store_vec(dst + i, v[u]);
    }
  }
}

}  // namespace epkit::ep::kernels
