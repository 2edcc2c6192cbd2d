// Where the rebuilt internode mode's rings sit (docs/ep-internode.md,
// "Memory"): the concrete map of the region size_leg counts, the same on
// every rank, so an offset or signal a rank computes for itself is the one
// its peer uses. A network ring joins channel c of one node's rank to
// channel c of another node's rank with the same local index (a rail):
// the sender's slots in its send area, the receiver's in its receive area,
// each ring a run of whole chunks (a put carries one chunk of rows), its
// tails (one per chunk slot) at the receiver and its credits at the sender
// in the leg's signal array. Slots and signals are indexed by (channel,
// peer's place among the other nodes), so every signal has one writer.
#pragma once

#include <epkit/result.h>

#include <cstddef>
#include <cstdint>

#include "ep/network_leg/credit_ring.h"
#include "ep/network_leg/sizing.h"

namespace epkit::ep::network_leg {

struct RingLayout {
  LegShape shape;
  LegBytes bytes;  ///< size_leg's count; `total` is the window's size
  int remote_nodes = 0;
  std::uint64_t chunk_bytes = 0;      ///< chunk_slots rows of the row pitch
  std::uint32_t chunks_per_ring = 0;  ///< whole chunks in a peer's share of the slots
  /// Offsets in the window, in size_leg's order: send rings, receive rings,
  /// NVLink rings, counters, count messages, token routing.
  std::uint64_t network_send = 0, network_recv = 0, nvl_rings = 0, counters = 0;
  std::uint64_t count_messages = 0, token_routing = 0;
  /// The leg's signals: tails, then credits.
  std::uint32_t tails = 0, credits = 0, num_signals = 0;

  /// The other nodes, 0..remote_nodes - 1, as `node` counts them.
  static int peer_index(int node, int other) { return other < node ? other : other - 1; }
  /// Channel `channel`'s ring from node `from` to node `to` (from != to),
  /// in `window` on both ends; a credit every `credit_every` chunks.
  CreditRing network_ring(int channel, int from, int to, WindowId window,
                          std::uint32_t credit_every = 1) const;
};

/// size_leg's checks and counts, then the map; an error names what is out of
/// range (as size_leg's do) or a ring of fewer than two chunks.
Result<RingLayout> plan_rings(const LegShape& shape);

}  // namespace epkit::ep::network_leg
