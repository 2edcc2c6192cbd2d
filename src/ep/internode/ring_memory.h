// Ring mode's memory (BufferOptions::internode_rings): the shape every rank
// shares and where the Buffer's regions sit, computed from the options alone
// (Buffer::bytes_needed answers from it without allocating). The network
// rings split a channel's rows among the nodes and the NVLink sub-rings a
// local rank's among the source nodes, so the total barely moves with the
// node count (docs/ep-internode.md, "Ring mode").
#pragma once

#include <epkit/ep.h>
#include <epkit/result.h>

#include <cstddef>

#include "ep/internode/ring_kernels.h"

namespace epkit::ep {

namespace k = kernels;

struct RingMemory {
  k::RingShape shape;  ///< node and local left at 0: the caller's place
  // Offsets in the Buffer's own memory (the leg window) past the rings and
  // messages the shape places: the counters, the combine's outputs.
  std::size_t net_sent = 0, net_received = 0, net_credited = 0, nvl_written = 0, nvl_read = 0;
  std::size_t phase = 0, filling = 0, draining = 0, drained = 0;
  std::size_t counters_end = 0;  ///< [net_sent, counters_end) starts at zero
  std::size_t out_x = 0, out_w = 0;
  /// What the Buffer's layout, barrier and leg exchanges use in either mode
  /// (InternodeLayout's regions of the same names).
  std::size_t per_rank = 0, per_node = 0, per_expert = 0, in_rank = 0, barrier = 0;
  std::size_t leg_counters = 0, leg_done = 0;
  std::size_t total = 0;         ///< the Buffer's own memory
  std::size_t nvl_bytes = 0;     ///< the NVLink area in the node's shared heap
  int max_experts_per_rank = 0;  ///< what a count message holds
};

/// The shape and map for these options on `ranks` ranks; an error names the
/// option out of range (channels, chunk rows, ring rows).
Result<RingMemory> ring_memory(const BufferOptions& options, int ranks);

/// Counters of a Buffer's memory at `base` (RingMemory's offsets).
k::RingCounters ring_counters(const RingMemory& m, std::uint8_t* base);

}  // namespace epkit::ep
