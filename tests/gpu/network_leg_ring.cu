#include "ep/network_leg/credit_ring.h"
#include "ep/network_leg/device_calls.h"
#include "ep/network_leg/device_moves.cuh"
#include "network_leg_ring.h"

namespace epkit::test {
namespace {

using namespace ep::network_leg;

constexpr int kThreads = 256;

// Word j of message i from src to dst: every message differs, so a slot
// read a lap late or from the wrong peer is caught.
__device__ std::uint32_t pattern(int src, int dst, std::uint32_t i, std::uint32_t j) {
  std::uint32_t x = static_cast<std::uint32_t>(src) * 0x9E3779B1u ^
                    static_cast<std::uint32_t>(dst) * 0x85EBCA77u ^ i * 0xC2B2AE3Du ^ j;
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  x ^= x >> 12;
  return x;
}

// The ring from `src` to `dst` in the layout of RingArgs (both ends
// describe it alike): windows 0 (send) and 1 (receive) indexed by the other
// rank, a tail per (source, slot), a credit per destination.
__device__ CreditRing ring_of(const RingArgs& a, int src, int dst) {
  CreditRing r;
  r.slots = a.slots;
  r.credit_every = 1;
  r.slot_bytes = a.bytes;
  r.send_window = WindowId{0};
  r.send_offset = static_cast<std::uint64_t>(dst) * a.slots * a.bytes;
  r.recv_window = WindowId{1};
  r.recv_offset = static_cast<std::uint64_t>(src) * a.slots * a.bytes;
  r.tail = SignalId{static_cast<std::uint32_t>(src) * a.slots};
  r.credit = SignalId{static_cast<std::uint32_t>(a.leg.world_size) * a.slots +
                      static_cast<std::uint32_t>(dst)};
  return r;
}

__device__ void report(RingReport& r, std::uint32_t status, int blamed) {
  if (r.status == ring_ok) {
    r.status = status;
    r.blamed = blamed;
  }
}

__device__ void sender(const RingArgs& a, int peer, RingReport& r) {
  __shared__ int stop;
  const int me = a.leg.rank;
  const std::uint32_t words = a.bytes / 4;
  const CreditRing ring = ring_of(a, me, peer);
  FlushMark mark;
  if (threadIdx.x == 0) stop = 0;
  __syncthreads();
  for (std::uint32_t i = 0; i < a.messages && i < a.stop_after; ++i) {
    // Slot reuse: the peer has consumed message i - slots (its credit also
    // means our copy of it finished: the signal followed the bytes).
    if (threadIdx.x == 0 && !ring_wait_room(a.leg, ring, i, a.timeout_ns, peer)) {
      report(r, ring_wait_expired, peer);
      stop = 1;
    }
    __syncthreads();
    if (stop) break;
    auto* out = reinterpret_cast<std::uint32_t*>(a.send + ring_send_offset(ring, i));
    for (std::uint32_t j = threadIdx.x; j < words; j += blockDim.x)
      out[j] = pattern(me, peer, i, j);
    // The copy engine reads the slot after the proxy sees the request.
    __threadfence_system();
    __syncthreads();
    if (a.leg.grants != nullptr) {
      // The producer moves the bytes: warp 0 together.
      if (threadIdx.x < 32) {
        const PostStatus posted = leg_put_moved(
            a.leg, peer, ring.recv_window, ring_recv_offset(ring, i), ring.send_window,
            ring_send_offset(ring, i), a.bytes, ring_tail(ring, i), 1, a.timeout_ns);
        if (threadIdx.x == 0) {
          if (posted != PostStatus::posted) {
            // A put never granted never crossed the NIC: its peer's doing.
            report(r, posted == PostStatus::timed_out ? ring_wait_expired : ring_post_failed,
                   posted == PostStatus::timed_out ? peer : -1);
            stop = 1;
          } else {
            r.messages = i + 1;
          }
        }
      }
    } else if (threadIdx.x == 0) {
      if (ring_send(a.leg, ring, peer, i, a.bytes, a.timeout_ns, &mark) != PostStatus::posted) {
        report(r, ring_post_failed, -1);
        stop = 1;
      } else {
        r.messages = i + 1;
      }
    }
    __syncthreads();
    if (stop) break;
  }
  if (threadIdx.x == 0 && !stop && a.stop_after == 0xffffffffu &&
      leg_flush(a.leg, mark, a.timeout_ns) != PostStatus::posted) {
    report(r, ring_flush_expired, -1);
  }
}

__device__ void receiver(const RingArgs& a, int peer, RingReport& r) {
  __shared__ int stop;
  __shared__ unsigned long long errors;
  const int me = a.leg.rank;
  const std::uint32_t words = a.bytes / 4;
  const CreditRing ring = ring_of(a, peer, me);
  std::uint64_t credited = 0;  // thread 0's
  if (threadIdx.x == 0) {
    stop = 0;
    errors = 0;
  }
  __syncthreads();
  for (std::uint32_t i = 0; i < a.messages && i < a.stop_after; ++i) {
    if (threadIdx.x == 0 && !ring_wait_landed(a.leg, ring, i, a.timeout_ns, peer)) {
      report(r, ring_wait_expired, peer);
      stop = 1;
    }
    __syncthreads();
    if (stop) break;
    const auto* in = reinterpret_cast<const std::uint32_t*>(a.recv + ring_recv_offset(ring, i));
    unsigned long long bad = 0;
    // Past L1: the copy engine rewrote the slot since the last lap.
    for (std::uint32_t j = threadIdx.x; j < words; j += blockDim.x) {
      bad += __ldcg(in + j) != pattern(peer, me, i, j) ? 1 : 0;
    }
    if (bad > 0) atomicAdd(&errors, bad);
    __syncthreads();
    const bool last = i + 1 == a.messages;
    if (a.leg.grants != nullptr) {
      if (threadIdx.x < 32) {
        const std::uint64_t due = ring_credit_due(ring, i, last, credited);
        const PostStatus posted =
            due == 0 ? PostStatus::posted
                     : leg_signal_moved(a.leg, peer, ring.credit, due, a.timeout_ns);
        credited += due;
        if (threadIdx.x == 0) {
          r.messages = i + 1;
          if (posted != PostStatus::posted) {
            report(r, posted == PostStatus::timed_out ? ring_wait_expired : ring_post_failed,
                   posted == PostStatus::timed_out ? peer : -1);
            stop = 1;
          }
        }
      }
    } else if (threadIdx.x == 0) {
      r.messages = i + 1;
      if (ring_consumed(a.leg, ring, peer, i, last, credited, a.timeout_ns) != PostStatus::posted) {
        report(r, ring_post_failed, -1);
        stop = 1;
      }
    }
    __syncthreads();
    if (stop) break;
  }
  if (threadIdx.x == 0) r.errors = errors;
}

__global__ void __launch_bounds__(kThreads) ring_kernel(RingArgs a) {
  const int world = a.leg.world_size;
  const int block = static_cast<int>(blockIdx.x);
  const int peer = block % world;
  if (peer == a.leg.rank) return;
  RingReport& r = a.reports[block];
  if (block < world) {
    sender(a, peer, r);
  } else {
    receiver(a, peer, r);
  }
}

}  // namespace

cudaError_t launch_ring(const RingArgs& args, cudaStream_t stream) {
  ring_kernel<<<2 * args.leg.world_size, kThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace epkit::test
