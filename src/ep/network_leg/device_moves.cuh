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

/// Copies `bytes` with the warp's lanes: 16 bytes a lane a step when both
/// ends and the size allow it, else 4 or 1.
__device__ inline void warp_copy(std::uint8_t* dst, const std::uint8_t* src, std::uint64_t bytes,
                                 int lane) {
  const auto align = reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src) |
                     static_cast<std::uintptr_t>(bytes);
  if (align % 16 == 0) {
    // Four loads in flight a lane before their stores: one warp is all the
    // NIC has, and a load at a time leaves it latency-bound.
    auto* d = reinterpret_cast<int4*>(dst);
    const auto* s = reinterpret_cast<const int4*>(src);
    const std::uint64_t n = bytes / 16;
    std::uint64_t i = static_cast<std::uint64_t>(lane);
    for (; i + 96 < n; i += 128) {
      const int4 a = s[i], b = s[i + 32], c = s[i + 64], e = s[i + 96];
      d[i] = a;
      d[i + 32] = b;
      d[i + 64] = c;
      d[i + 96] = e;
    }
    for (; i < n; i += 32) d[i] = s[i];
  } else if (align % 4 == 0) {
    auto* d = reinterpret_cast<std::uint32_t*>(dst);
    const auto* s = reinterpret_cast<const std::uint32_t*>(src);
    for (std::uint64_t i = static_cast<std::uint64_t>(lane); i < bytes / 4; i += 32) d[i] = s[i];
  } else {
    for (std::uint64_t i = static_cast<std::uint64_t>(lane); i < bytes; i += 32) dst[i] = src[i];
  }
}

}  // namespace moves

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
  std::uint8_t* dst = nullptr;
  const std::uint8_t* src = nullptr;
  auto status = static_cast<std::uint32_t>(PostStatus::refused);
  if (lane == 0 && leg.grants != nullptr && leg.peer_windows != nullptr &&
      leg.peer_signals != nullptr && request_valid(leg, request)) {
    bool ok = true;
    if (bytes > 0) {
      const std::uint32_t per = leg.windows_per_peer;
      ok = src_window.value < per && dst_window.value < per;
      if (ok) {
        const PeerWindow& s =
            leg.peer_windows[static_cast<std::uint32_t>(leg.rank) * per + src_window.value];
        const PeerWindow& d =
            leg.peer_windows[static_cast<std::uint32_t>(peer) * per + dst_window.value];
        ok = s.base != nullptr && d.base != nullptr && moves::fits(src_offset, bytes, s.bytes) &&
             moves::fits(dst_offset, bytes, d.bytes);
        src = s.base + src_offset;
        dst = d.base + dst_offset;
      }
    }
    if (ok) {
      const RequestRing ring = ring_of(leg);
      const Claim claim = claim_slot(ring, timeout_ns);
      status = static_cast<std::uint32_t>(claim.status);
      if (claim.status == PostStatus::posted) {
        slot_of(ring, claim.ticket) = request;
        publish_slot(ring, claim.ticket);
        // Grants of one slot only grow (a later lap's grant may come first
        // where the NIC reorders: then this one has crossed too, or soon
        // will; the model is approximate there, the data is not).
        const std::uint64_t* grant = leg.grants + claim.ticket % leg.queue_slots;
        const std::uint64_t want = claim.ticket + 1;
        if (!shim::wait_until([&] { return shim::load_acquire(grant) >= want; }, timeout_ns))
          status = static_cast<std::uint32_t>(PostStatus::timed_out);
      }
    }
  }
  status = __shfl_sync(0xffffffffu, status, 0);
  if (status != static_cast<std::uint32_t>(PostStatus::posted)) {
    return static_cast<PostStatus>(status);
  }
  if (bytes > 0) {
    const auto d = reinterpret_cast<std::uintptr_t>(dst);
    const auto s = reinterpret_cast<std::uintptr_t>(src);
    const auto dd = __shfl_sync(0xffffffffu, static_cast<unsigned long long>(d), 0);
    const auto ss = __shfl_sync(0xffffffffu, static_cast<unsigned long long>(s), 0);
    moves::warp_copy(reinterpret_cast<std::uint8_t*>(dd), reinterpret_cast<const std::uint8_t*>(ss),
                     bytes, lane);
  }
  // Every lane's bytes before the signal: a waiter that sees it (acquire)
  // reads them.
  __threadfence_system();
  __syncwarp();
  if (lane == 0 && add > 0) {
    cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system> word(
        leg.peer_signals[peer][signal.value]);
    word.fetch_add(add, cuda::std::memory_order_release);
  }
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
