#include "ep/network_leg/ring_layout.h"

#include <fmt/format.h>

namespace epkit::ep::network_leg {

Result<RingLayout> plan_rings(const LegShape& shape) {
  auto counted = size_leg(shape);
  if (!counted) return counted.error();
  RingLayout l;
  l.shape = shape;
  l.bytes = counted.value();
  l.remote_nodes = shape.nodes - 1;
  l.chunk_bytes = static_cast<std::uint64_t>(shape.chunk_slots) * l.bytes.row_pitch;
  const auto C = static_cast<std::uint64_t>(shape.channels);
  const auto remote = static_cast<std::uint64_t>(l.remote_nodes);
  const auto share = static_cast<std::uint64_t>(l.bytes.slots_per_peer) * l.bytes.row_pitch;
  if (remote > 0) {
    // size_leg made sure a share holds two chunks; what is left past the
    // last whole chunk stays unused.
    l.chunks_per_ring = static_cast<std::uint32_t>(l.bytes.slots_per_peer / shape.chunk_slots);
  }
  std::uint64_t at = 0;
  auto take = [&](std::uint64_t bytes) {
    const std::uint64_t here = at;
    at += bytes;
    return here;
  };
  l.network_send = take(C * remote * share);
  l.network_recv = take(C * remote * share);
  l.nvl_rings = take(l.bytes.nvl_rings);
  l.counters = take(l.bytes.counters);
  l.count_messages = take(l.bytes.count_messages);
  l.token_routing = take(l.bytes.token_routing);
  if (at != l.bytes.total) {
    return make_error(ErrorCode::internal,
                      fmt::format("network leg layout: the map takes {} bytes, size_leg counts {}",
                                  at, l.bytes.total));
  }
  const std::uint64_t tails = C * remote * l.chunks_per_ring;
  const std::uint64_t credits = C * remote;
  if (tails + credits > (std::uint64_t{1} << 24)) {
    return make_error(ErrorCode::invalid,
                      fmt::format("network leg layout: {} signals, more than a leg holds (2^24)",
                                  tails + credits));
  }
  l.tails = 0;
  l.credits = static_cast<std::uint32_t>(tails);
  l.num_signals = static_cast<std::uint32_t>(tails + credits);
  return l;
}

CreditRing RingLayout::network_ring(int channel, int from, int to, WindowId window,
                                    std::uint32_t credit_every) const {
  const std::uint64_t share = static_cast<std::uint64_t>(bytes.slots_per_peer) * bytes.row_pitch;
  // Ring number at each end: by channel, then by the other end's place.
  const auto at_sender = static_cast<std::uint64_t>(channel) * remote_nodes + peer_index(from, to);
  const auto at_receiver =
      static_cast<std::uint64_t>(channel) * remote_nodes + peer_index(to, from);
  CreditRing r;
  r.slots = chunks_per_ring;
  r.credit_every = credit_every;
  r.slot_bytes = chunk_bytes;
  r.send_window = window;
  r.send_offset = network_send + at_sender * share;
  r.recv_window = window;
  r.recv_offset = network_recv + at_receiver * share;
  r.tail = SignalId{tails + static_cast<std::uint32_t>(at_receiver) * chunks_per_ring};
  r.credit = SignalId{credits + static_cast<std::uint32_t>(at_sender)};
  return r;
}

}  // namespace epkit::ep::network_leg
