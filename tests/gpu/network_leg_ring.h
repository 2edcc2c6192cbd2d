// The kernel behind tests/gpu/network_leg.cc: every rank streams messages
// to every peer through the network leg's credit rings
// (ep/network_leg/credit_ring.h, the rebuilt internode kernels' rings:
// docs/ep-internode.md, "Normal mode's protocol") into a ring of slots in
// the peer's receive window, with credits back. Shared by the host program and the .cu file, so
// plain data only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ep/network_leg/leg.h"

namespace epkit::test {

/// What one block of the ring kernel reports (host-mapped, one per block).
struct RingReport {
  std::int32_t blamed = -1;    ///< the peer a wait expired on, or -1
  std::uint32_t status = 0;    ///< RingStatus
  std::uint64_t errors = 0;    ///< words that differed from the pattern
  std::uint64_t messages = 0;  ///< messages sent (sender) or checked (receiver)
};

enum RingStatus : std::uint32_t {
  ring_ok = 0,
  ring_wait_expired = 1,  ///< a tail or credit signal did not come within the timeout
  ring_post_failed = 2,   ///< the request ring refused or had no room for the timeout
  /// The rank's flush did not return: the ring's done word trails every
  /// put of the rank, so a put that never lands (to any peer) holds it; the
  /// backend's fault names that peer.
  ring_flush_expired = 3,
};

/// Signals: a tail per (source rank, slot) at [0, world x slots), counting
/// the messages that landed in that slot; credits for the rings this rank
/// sends, one per destination, at world x slots + destination. Each has one
/// writer, as the emulated NIC wants. One counter per ring would not do:
/// the leg may complete puts out of order (the emulated NIC's jitter, GIN's
/// contexts), so a count of n says n puts landed, not which; a slot's own
/// count says its own put did. Credits are bare signals, sent after the
/// receiver consumed its messages in order, so a count of them is exact.
/// Windows: 0 the send slots [world][slots][bytes], 1 the receive slots
/// [world][slots][bytes], both indexed by the other rank.
struct RingArgs {
  ep::network_leg::DeviceLeg leg;
  std::uint8_t* send = nullptr;
  const std::uint8_t* recv = nullptr;
  std::uint32_t bytes = 0;  ///< a message; a multiple of 16
  std::uint32_t slots = 0;  ///< ring slots per peer
  std::uint32_t messages = 0;
  /// A rank that dies: its blocks stop after this many messages.
  std::uint32_t stop_after = 0xffffffffu;
  std::int64_t timeout_ns = 0;
  RingReport* reports = nullptr;  ///< 2 x world: senders by peer, then receivers
};

/// Signals the ring needs: world x (slots + 1).
inline std::uint32_t ring_signals(int world, std::uint32_t slots) {
  return static_cast<std::uint32_t>(world) * (slots + 1);
}

/// 2 x world blocks (a sender and a receiver per peer; those for this rank
/// return at once).
cudaError_t launch_ring(const RingArgs& args, cudaStream_t stream);

}  // namespace epkit::test
