// The rebuilt internode mode's memory per GPU, computed without allocating
// (docs/ep-internode.md, "Rebuild", "Memory"). Rings are fixed in size: the
// network ring slots of a channel are shared by the remote nodes, so the node
// count enters only through small per-peer terms (counters, count messages,
// per-token routing).
#pragma once

#include <epkit/result.h>

#include <cstddef>
#include <cstdint>

namespace epkit::ep::network_leg {

struct LegShape {
  int ranks_per_node = 8;  ///< G, 1..8 (the NVLink domain)
  int nodes = 2;           ///< N
  int hidden = 7168;       ///< H
  int topk = 8;            ///< k
  int num_experts = 256;   ///< E, for the count messages
  int max_tokens = 4096;   ///< T, tokens per rank per call (the handle's routing)
  int element_bytes = 2;   ///< bytes of one element of x: 2 (BF16) or 1 (FP8, with scales)
  int channels = 12;       ///< C, SMs / 2 (DeepEP V1's split)
  int network_ring_slots =
      256;  ///< R: rows per channel and direction, shared by the N - 1 remote nodes
  int nvl_ring_slots = 256;  ///< S: rows per (channel, local rank)
  int chunk_slots = 4;       ///< rows per put; each peer's share must hold two chunks
};

/// Bytes per region; `total` is what the Buffer allocates.
struct LegBytes {
  std::size_t row_pitch = 0;  ///< P: x, FP8 scales, int32 top-k, weights, source meta; 16-aligned
  int slots_per_peer = 0;     ///< floor(R / (N - 1)); 0 with one node
  std::size_t network_rings = 0;  ///< send + receive
  std::size_t nvl_rings = 0;
  std::size_t counters = 0;        ///< ring heads/tails/credits, NVLink prefix counts
  std::size_t count_messages = 0;  ///< send + receive
  std::size_t token_routing = 0;   ///< per-token rows per node and per local rank (the handle)
  std::size_t total = 0;
};

/// An error (invalid) names the field that is out of range, or the ring that
/// is too small for the node count (fewer than two chunks per peer).
Result<LegBytes> size_leg(const LegShape& shape);

}  // namespace epkit::ep::network_leg
