// The device side of ep/network_leg/device_calls.h, compiled for the GPU so
// that every call of the shared header is proven to build with nvcc (the CPU
// tests run the host side of the same code). Nothing launches this kernel
// yet: the internode kernels will call the functions directly.
#include "ep/network_leg/credit_ring.h"
#include "ep/network_leg/device_calls.h"

namespace epkit::ep::network_leg {

/// One thread's round of every call: a put, a bare signal, a leader's post of
/// `count` requests, a wait and a flush. `status[0..4]` take the outcomes
/// (1 for a wait that was met), so none of them is optimised away.
__global__ void device_calls_round(DeviceLeg leg, int peer, const PutRequest* batch,
                                   std::uint32_t count, std::int64_t timeout_ns,
                                   std::uint32_t* status) {
  FlushMark mark;
  status[0] = static_cast<std::uint32_t>(leg_put(leg, peer, WindowId{1}, 64, WindowId{2}, 128, 256,
                                                 SignalId{0}, 1, timeout_ns, &mark, blockIdx.x));
  status[1] = static_cast<std::uint32_t>(
      leg_signal(leg, peer, SignalId{1}, 1, timeout_ns, &mark, blockIdx.x));
  status[2] = static_cast<std::uint32_t>(leg_post_many(leg, batch, count, timeout_ns, &mark));
  status[3] = leg_wait(leg, SignalId{0}, 1, timeout_ns) ? 1u : 0u;
  status[4] = static_cast<std::uint32_t>(leg_flush(leg, mark, timeout_ns));
}

/// The credit ring's calls (ep/network_leg/credit_ring.h), likewise: message
/// `i`'s room, send, landing and credit, and a row stream's.
__global__ void credit_ring_round(DeviceLeg leg, CreditRing ring, int peer, std::uint64_t i,
                                  std::int64_t timeout_ns, std::uint32_t* status) {
  std::uint64_t credited = 0;
  status[0] = ring_valid(ring) && ring_wait_room(leg, ring, i, timeout_ns) ? 1u : 0u;
  status[1] = static_cast<std::uint32_t>(ring_send(leg, ring, peer, i, 64, timeout_ns));
  status[2] = ring_wait_landed(leg, ring, i, timeout_ns) ? 1u : 0u;
  status[3] =
      static_cast<std::uint32_t>(ring_consumed(leg, ring, peer, i, true, credited, timeout_ns));
  status[4] = leg_exited(leg) >= 0 ? 1u : 0u;
  const RowStream rows{ring, 4, 16, i, 9};
  status[5] = stream_valid(rows) && stream_wait_room(leg, rows, 0, timeout_ns) &&
                      stream_wait_row(leg, rows, 0, timeout_ns)
                  ? 1u
                  : 0u;
  status[6] = static_cast<std::uint32_t>(stream_row_written(leg, rows, peer, 8, timeout_ns));
  status[7] = static_cast<std::uint32_t>(stream_row_read(leg, rows, peer, 8, credited, timeout_ns));
}

}  // namespace epkit::ep::network_leg
