// The rebuilt mode's ring map (ep/network_leg/ring_layout.h): it is exactly
// size_leg's count, region after region; every network ring is a valid
// credit ring inside its region; and no two rings share a slot or a signal
// at either end, for every channel and pair of nodes, so every signal has
// one writer.
#ifdef EPKIT_WITH_CUDA
#include "ep/network_leg/ring_layout.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace epkit::ep::network_leg {
namespace {

LegShape deepep_shape(int nodes) {
  LegShape s;  // DeepEP's test sizes: 4096 tokens, hidden 7168, top-8, 256 experts
  s.nodes = nodes;
  return s;
}

TEST(RingLayout, MapIsSizeLegsCountRegionAfterRegion) {
  for (int nodes : {1, 2, 3, 4, 16, 32}) {
    auto l = plan_rings(deepep_shape(nodes));
    ASSERT_TRUE(l.ok()) << l.error().message;
    const RingLayout& m = l.value();
    EXPECT_EQ(m.network_send, 0u);
    EXPECT_EQ(m.network_recv - m.network_send, m.bytes.network_rings / 2) << nodes;
    EXPECT_EQ(m.nvl_rings - m.network_recv, m.bytes.network_rings / 2) << nodes;
    EXPECT_EQ(m.counters - m.nvl_rings, m.bytes.nvl_rings) << nodes;
    EXPECT_EQ(m.count_messages - m.counters, m.bytes.counters) << nodes;
    EXPECT_EQ(m.token_routing - m.count_messages, m.bytes.count_messages) << nodes;
    EXPECT_EQ(m.bytes.total - m.token_routing, m.bytes.token_routing) << nodes;
  }
}

TEST(RingLayout, OneNodeHasNoNetworkRingsNorSignals) {
  auto l = plan_rings(deepep_shape(1));
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l.value().chunks_per_ring, 0u);
  EXPECT_EQ(l.value().num_signals, 0u);
  EXPECT_EQ(l.value().network_recv, 0u);
}

// Every ring of every channel between every ordered pair of nodes, checked
// at both of its ends.
void check_rings(const LegShape& shape) {
  auto planned = plan_rings(shape);
  ASSERT_TRUE(planned.ok()) << planned.error().message;
  const RingLayout& m = planned.value();
  const WindowId window{3};
  for (int node = 0; node < shape.nodes; ++node) {
    // At `node`: the send slots and credits of its rings to every other
    // node, the receive slots and tails of those from every other node.
    std::set<std::pair<std::uint64_t, std::uint64_t>> send, recv;  // [begin, end)
    std::set<std::uint32_t> signals;
    for (int c = 0; c < shape.channels; ++c) {
      for (int other = 0; other < shape.nodes; ++other) {
        if (other == node) continue;
        const std::string where = "channel " + std::to_string(c) + ", nodes " +
                                  std::to_string(node) + " and " + std::to_string(other);
        const CreditRing out = m.network_ring(c, node, other, window);
        const CreditRing in = m.network_ring(c, other, node, window, m.chunks_per_ring);
        ASSERT_TRUE(ring_valid(out)) << where;
        ASSERT_TRUE(ring_valid(in)) << where;
        EXPECT_GE(out.slots, 2u) << where;
        const std::uint64_t span = std::uint64_t{out.slots} * out.slot_bytes;
        EXPECT_GE(out.send_offset, m.network_send) << where;
        EXPECT_LE(out.send_offset + span, m.network_recv) << where;
        EXPECT_GE(in.recv_offset, m.network_recv) << where;
        EXPECT_LE(in.recv_offset + span, m.nvl_rings) << where;
        EXPECT_TRUE(send.insert({out.send_offset, out.send_offset + span}).second) << where;
        EXPECT_TRUE(recv.insert({in.recv_offset, in.recv_offset + span}).second) << where;
        EXPECT_TRUE(signals.insert(out.credit.value).second) << where;
        for (std::uint32_t s = 0; s < in.slots; ++s)
          EXPECT_TRUE(signals.insert(in.tail.value + s).second) << where << ", tail " << s;
      }
    }
    // Runs that start apart must not overlap either.
    for (const auto* runs : {&send, &recv}) {
      std::uint64_t end = 0;
      for (const auto& [b, e] : *runs) {
        EXPECT_GE(b, end) << "node " << node;
        end = e;
      }
    }
    for (std::uint32_t s : signals) EXPECT_LT(s, m.num_signals);
    EXPECT_EQ(signals.size(), m.num_signals) << "every signal of the leg is some ring's";
  }
}

TEST(RingLayout, NoTwoRingsShareASlotOrASignalAtEitherEnd) {
  LegShape s = deepep_shape(4);
  s.channels = 3;
  check_rings(s);
  s.nodes = 5;  // the slots do not divide evenly among the remote nodes
  s.network_ring_slots = 37;
  s.chunk_slots = 3;
  check_rings(s);
  check_rings(deepep_shape(2));
}

TEST(RingLayout, SignalsStayFewAtAnyNodeCount) {
  // DeepEP's sizes, 12 channels: a tail a chunk slot, a credit a ring.
  for (int nodes : {2, 4, 16, 32}) {
    auto l = plan_rings(deepep_shape(nodes));
    ASSERT_TRUE(l.ok());
    EXPECT_LE(l.value().num_signals, 12u * 64u + 12u * 31u) << nodes;
  }
}

TEST(RingLayout, ARingOfFewerThanTwoChunksIsRefusedAsSizeLegRefusesIt) {
  LegShape s = deepep_shape(32);
  s.network_ring_slots = 100;  // 3 slots a remote node: less than two chunks of 4
  auto l = plan_rings(s);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.error().message.find("fewer than two chunks"), std::string::npos)
      << l.error().message;
}

}  // namespace
}  // namespace epkit::ep::network_leg
#endif
