// Producer-moved puts for the emulated NIC on a GPU (DeviceLeg::grants):
// a warp posts its request to the ring as every queue backend does
// (device_calls.h), waits until the host's pacing model grants it (the
// put has crossed the modelled NIC: its bandwidth, latency, reordering,
// drops and stalls), then copies the bytes into the peer's window over its
// CUDA IPC mapping and adds to the peer's signal, all from the GPU. The host
// thread only drains, paces and grants, through host-mapped words: it makes
// no CUDA call, so no cudaMalloc or cudaFree of the application (which waits
// for running kernels under the driver's page-table lock) can stall it while
// a kernel waits on it. A warp's put returns once its bytes are written, so
// its source may be reused at once (flush has nothing left to wait for).
#pragma once

#include <cuda/atomic>

#include "ep/network_leg/device_calls.h"

namespace epkit::ep::network_leg {

namespace moves {

__device__ inline bool fits(std::uint64_t offset, std::uint64_t bytes, std::uint64_t size) {
  return offset <= size && bytes <= size - offset;
}

/// Copies `bytes` with `threads` threads (this one is `thread`): 16 bytes a
/// thread a step when both ends and the size allow it, else 4 or 1.
__device__ inline void copy(std::uint8_t* dst, const std::uint8_t* src, std::uint64_t bytes,
                            int thread, int threads) {
  const auto align = reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src) |
                     static_cast<std::uintptr_t>(bytes);
  const auto t = static_cast<std::uint64_t>(thread);
  const auto w = static_cast<std::uint64_t>(threads);
  if (align % 16 == 0) {
    // Four loads in flight a thread before their stores: a load at a time
    // leaves a few warps latency-bound.
    auto* d = reinterpret_cast<int4*>(dst);
    const auto* s = reinterpret_cast<const int4*>(src);
    const std::uint64_t n = bytes / 16;
    std::uint64_t i = t;
    for (; i + 3 * w < n; i += 4 * w) {
      // Through L2: the source may have been written by another kernel
      // while this one ran (LegPut::done), after this SM cached the line.
      const int4 a = __ldcg(s + i), b = __ldcg(s + i + w), c = __ldcg(s + i + 2 * w),
                 e = __ldcg(s + i + 3 * w);
      d[i] = a;
      d[i + w] = b;
      d[i + 2 * w] = c;
      d[i + 3 * w] = e;
    }
    for (; i < n; i += w) d[i] = __ldcg(s + i);
  } else if (align % 4 == 0) {
    auto* d = reinterpret_cast<std::uint32_t*>(dst);
    const auto* s = reinterpret_cast<const std::uint32_t*>(src);
    for (std::uint64_t i = t; i < bytes / 4; i += w) d[i] = s[i];
  } else {
    for (std::uint64_t i = t; i < bytes; i += w) dst[i] = src[i];
  }
}

}  // namespace moves

/// A producer-moved put in steps, for callers that copy with more threads
/// than one warp (leg_exchange.cu: a block a peer) or that post the next put
/// before copying this one (the pacing model then sees the NIC busy, as a
/// real NIC with several requests queued is). post_moved and granted are
/// one thread's; the copy is every thread's; land_signal is one thread's,
/// after every copying thread's fence.
struct MovedPut {
  PostStatus status = PostStatus::refused;
  std::uint64_t ticket = 0;
  std::uint8_t* dst = nullptr;
  const std::uint8_t* src = nullptr;
};

/// Checks the request (request_valid, the windows and ranges this rank's
/// leg maps) and posts it to the ring; `posted` with its ticket and both
/// ends, else why not (refused before a ticket is taken).
__device__ inline MovedPut post_moved(const DeviceLeg& leg, const PutRequest& request,
                                      std::int64_t timeout_ns) {
  MovedPut out;
  if (leg.grants == nullptr || leg.peer_windows == nullptr || leg.peer_signals == nullptr ||
      !request_valid(leg, request))
    return out;
  if (request.bytes > 0) {
    const std::uint32_t per = leg.windows_per_peer;
    if (request.src_window.value >= per || request.dst_window.value >= per) return out;
    const PeerWindow& s =
        leg.peer_windows[static_cast<std::uint32_t>(leg.rank) * per + request.src_window.value];
    const PeerWindow& d =
        leg.peer_windows[static_cast<std::uint32_t>(request.peer) * per + request.dst_window.value];
    if (s.base == nullptr || d.base == nullptr ||
        !moves::fits(request.src_offset, request.bytes, s.bytes) ||
        !moves::fits(request.dst_offset, request.bytes, d.bytes))
      return out;
    out.src = s.base + request.src_offset;
    out.dst = d.base + request.dst_offset;
  }
  const RequestRing ring = ring_of(leg);
  const Claim claim = claim_slot(ring, timeout_ns);
  out.status = claim.status;
  out.ticket = claim.ticket;
  if (claim.status == PostStatus::posted) {
    slot_of(ring, claim.ticket) = request;
    publish_slot(ring, claim.ticket);
  }
  return out;
}

/// Waits until the host's pacing model grants the ticket: the put has
/// crossed the modelled NIC. Grants of one slot only grow (a later lap's
/// grant may come first where the NIC reorders: then this one has crossed
/// too, or soon will; the model is approximate there, the data is not).
__device__ inline bool granted(const DeviceLeg& leg, std::uint64_t ticket,
                               std::int64_t timeout_ns) {
  const std::uint64_t* grant = leg.grants + ticket % leg.queue_slots;
  const std::uint64_t want = ticket + 1;
  return shim::wait_until([&] { return shim::load_acquire(grant) >= want; }, timeout_ns);
}

/// Adds to the peer's signal once the put's bytes are written: every
/// copying thread fenced (system scope) and the caller synchronised them
/// before this, so a waiter that sees the signal (acquire) reads the bytes.
__device__ inline void land_signal(const DeviceLeg& leg, int peer, SignalId signal,
                                   std::uint64_t add) {
  if (add == 0) return;
  cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system> word(
      leg.peer_signals[peer][signal.value]);
  word.fetch_add(add, cuda::std::memory_order_release);
}

/// put(...) by a whole warp (every lane calls it with the same arguments)
/// on a leg whose producers move the bytes. The same outcomes as leg_put;
/// refused also for windows or ranges outside what the leg maps; timed_out
/// also when the grant does not come (a dropped or stalled NIC, a peer the
/// host refused). `bytes` 0: a bare signal, still paced.
__device__ inline PostStatus leg_put_moved(const DeviceLeg& leg, int peer, WindowId dst_window,
                                           std::uint64_t dst_offset, WindowId src_window,
                                           std::uint64_t src_offset, std::uint64_t bytes,
                                           SignalId signal, std::uint64_t add,
                                           std::int64_t timeout_ns, std::uint32_t channel = 0) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const PutRequest request{peer,       channel, dst_window, src_window, dst_offset,
                           src_offset, bytes,   signal,     add};
  MovedPut put;
  if (lane == 0) {
    put = post_moved(leg, request, timeout_ns);
    if (put.status == PostStatus::posted && !granted(leg, put.ticket, timeout_ns))
      put.status = PostStatus::timed_out;
  }
  const auto status = __shfl_sync(0xffffffffu, static_cast<std::uint32_t>(put.status), 0);
  if (status != static_cast<std::uint32_t>(PostStatus::posted))
    return static_cast<PostStatus>(status);
  if (bytes > 0) {
    const auto dd = __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(put.dst), 0);
    const auto ss = __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(put.src), 0);
    moves::copy(reinterpret_cast<std::uint8_t*>(dd), reinterpret_cast<const std::uint8_t*>(ss),
                bytes, lane, 32);
  }
  __threadfence_system();
  __syncwarp();
  if (lane == 0) land_signal(leg, peer, signal, add);
  __syncwarp();
  return PostStatus::posted;
}

/// signal(...) by a whole warp: a paced put of no bytes.
__device__ inline PostStatus leg_signal_moved(const DeviceLeg& leg, int peer, SignalId signal,
                                              std::uint64_t add, std::int64_t timeout_ns,
                                              std::uint32_t channel = 0) {
  if (add == 0) return PostStatus::refused;
  return leg_put_moved(leg, peer, WindowId{}, 0, WindowId{}, 0, 0, signal, add, timeout_ns,
                       channel);
}

}  // namespace epkit::ep::network_leg
