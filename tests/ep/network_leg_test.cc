// The rebuilt internode leg's host-side pieces that need no GPU: the memory
// it plans per GPU (fixed by ring sizes, the node count only through small
// per-peer terms) and the emulated NIC's pacing model (cap, latency,
// reordering, faults) on a clock the test moves.
#ifdef EPKIT_WITH_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ep/network_leg/emulated_pacing.h"
#include "ep/network_leg/leg.h"
#include "ep/network_leg/sizing.h"

namespace epkit::ep::network_leg {
namespace {

// DeepEP's test_internode.py: 4096 tokens, hidden 7168, BF16, top-8, 256
// experts, 8 ranks per node, 24 SMs (12 channels).
LegShape deepep_test(int nodes) {
  LegShape s;
  s.nodes = nodes;
  return s;
}

TEST(NetworkLegSizing, RowIsDeepEpV1sRow) {
  auto b = size_leg(deepep_test(2));
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b.value().row_pitch,
            14416u);  // 14336 x + 32 indices + 32 weights + 8 source meta, 16-aligned
  EXPECT_EQ(b.value().total, 443029008u);  // the figure docs/ep-internode.md gives for 2 nodes
}

TEST(NetworkLegSizing, Fp8RowCarriesScales) {
  auto s = deepep_test(2);
  s.element_bytes = 1;
  auto b = size_leg(s);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b.value().row_pitch, 7472u);  // 7168 + 56 x 4 scales + 64 + 8 = 7464, aligned
}

TEST(NetworkLegSizing, NodeCountChangesMemoryByLessThanTenPercentFrom2To32) {
  auto two = size_leg(deepep_test(2));
  ASSERT_TRUE(two.ok()) << two.error().message;
  const auto base = static_cast<double>(two.value().total);
  for (int nodes : {2, 4, 8, 16, 32}) {
    auto b = size_leg(deepep_test(nodes));
    ASSERT_TRUE(b.ok()) << nodes << " nodes: " << b.error().message;
    const auto total = static_cast<double>(b.value().total);
    EXPECT_LE(std::abs(total - base) / base, 0.10)
        << nodes << " nodes: " << total << " bytes vs " << base;
    // The network rings never exceed R slots per channel and direction.
    EXPECT_LE(b.value().network_rings, 2u * 12u * 256u * 14416u) << nodes << " nodes";
  }
}

TEST(NetworkLegSizing, DeepEpDefaultBudgetTakes4096TokensAt4And16Nodes) {
  // test_internode.py passes num_nvl_bytes 2e9 and num_rdma_bytes 1e9; epkit's
  // budget is their sum.
  constexpr double budget = 2e9 + 1e9;
  for (int nodes : {4, 16}) {
    auto s = deepep_test(nodes);
    ASSERT_EQ(s.max_tokens, 4096);
    auto b = size_leg(s);
    ASSERT_TRUE(b.ok()) << nodes << " nodes: " << b.error().message;
    EXPECT_LE(static_cast<double>(b.value().total), budget) << nodes << " nodes";
  }
}

TEST(NetworkLegSizing, OneNodeHasNoNetworkRings) {
  auto b = size_leg(deepep_test(1));
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b.value().slots_per_peer, 0);
  EXPECT_EQ(b.value().network_rings, 0u);
  EXPECT_GT(b.value().nvl_rings, 0u);
}

TEST(NetworkLegSizing, RingTooSmallForTheNodesIsRefusedWithTheFix) {
  auto s = deepep_test(32);
  s.network_ring_slots = 64;  // 2 per remote node, fewer than two chunks of 4
  auto b = size_leg(s);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code, ErrorCode::invalid);
  EXPECT_NE(b.error().message.find("32 nodes"), std::string::npos) << b.error().message;
  EXPECT_NE(b.error().message.find("at least 248"), std::string::npos) << b.error().message;
}

TEST(NetworkLegSizing, OutOfRangeFieldIsNamed) {
  auto s = deepep_test(2);
  s.ranks_per_node = 9;
  auto b = size_leg(s);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("ranks_per_node = 9"), std::string::npos) << b.error().message;
}

TEST(NetworkLegInterface, PutRequestLayoutAndBackendNames) {
  EXPECT_EQ(sizeof(PutRequest), 56u);
  EXPECT_STREQ(to_string(BackendKind::emulated_nic), "emulated NIC");
  EXPECT_STREQ(to_string(BackendKind::nccl_proxy), "NCCL proxy");
  EXPECT_STREQ(to_string(BackendKind::nccl_gin), "NCCL GIN");
}

EmulatedPacing make_pacing(int ranks, const PacingConfig& config, Clock& clock) {
  auto p = EmulatedPacing::create(ranks, config, clock);
  EXPECT_TRUE(p.ok()) << p.error().message;
  return std::move(p.value());
}

TEST(EmulatedPacing, ThroughputStaysUnderTheCap) {
  ManualClock clock;
  PacingConfig config;
  config.bytes_per_s = 1e9;
  config.burst_bytes = 64 << 10;
  config.latency_ns = 0;
  auto nic = make_pacing(2, config, clock);
  constexpr std::uint64_t put = 1 << 20;
  constexpr int puts = 500;
  for (int i = 0; i < puts; ++i) ASSERT_TRUE(nic.post(0, 1, put).ok());
  // At every 10 ms the bytes landed are at most cap x time + burst, and at
  // least cap x time minus one put (the bucket never idles while puts wait).
  std::uint64_t landed = 0;
  for (int step = 1; step <= 60; ++step) {
    clock.advance(10'000'000);
    for (const auto& c : nic.poll()) landed += c.bytes;
    const double t = static_cast<double>(clock.now_ns()) * 1e-9;
    const double cap = 1e9 * t + static_cast<double>(config.burst_bytes);
    EXPECT_LE(static_cast<double>(landed), cap) << "at " << t << " s";
    if (landed < put * puts) {
      EXPECT_GE(static_cast<double>(landed), 1e9 * t - static_cast<double>(put))
          << "at " << t << " s";
    }
  }
  EXPECT_EQ(landed, put * puts);
  EXPECT_EQ(nic.in_flight(), 0u);
}

TEST(EmulatedPacing, NothingLandsBeforeTheLatency) {
  ManualClock clock(1'000);
  PacingConfig config;
  config.latency_ns = 5'000;
  auto nic = make_pacing(2, config, clock);
  ASSERT_TRUE(nic.post(0, 1, 4096, SignalId{3}, 1).ok());
  clock.advance(4'999);
  EXPECT_TRUE(nic.poll().empty());
  EXPECT_EQ(nic.signal(1, SignalId{3}), 0u);
  clock.advance(1);
  auto done = nic.poll();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].complete_ns - done[0].posted_ns, 5'000);
  EXPECT_EQ(nic.signal(1, SignalId{3}), 1u);
  EXPECT_EQ(nic.signal(0, SignalId{3}), 0u);  // the destination's signal, not the source's
}

std::vector<std::uint64_t> landing_order(const PacingConfig& config) {
  ManualClock clock;
  auto nic = make_pacing(2, config, clock);
  for (int i = 0; i < 64; ++i)
    EXPECT_TRUE(nic.post(0, 1, 1000 + 97 * static_cast<std::uint64_t>(i % 7)).ok());
  clock.advance(1'000'000'000);
  std::vector<std::uint64_t> ids;
  for (const auto& c : nic.poll()) ids.push_back(c.id);
  EXPECT_EQ(ids.size(), 64u);
  return ids;
}

TEST(EmulatedPacing, PutsLandInOrderUnlessReorderingIsOn) {
  PacingConfig config;
  config.bytes_per_s = 1e8;  // 10 ns a byte, no burst: puts queue behind each other
  config.burst_bytes = 0;
  auto in_order = landing_order(config);
  EXPECT_TRUE(std::is_sorted(in_order.begin(), in_order.end()));

  config.reorder_jitter_ns = 200'000;
  config.seed = 7;
  auto reordered = landing_order(config);
  EXPECT_FALSE(std::is_sorted(reordered.begin(), reordered.end()));
  EXPECT_EQ(reordered, landing_order(config));  // the same seed, the same order
  config.seed = 8;
  EXPECT_NE(reordered, landing_order(config));
}

TEST(EmulatedPacing, WaitReturnsWhenTheSignalLands) {
  ManualClock clock;
  PacingConfig config;
  config.latency_ns = 3'000;
  auto nic = make_pacing(2, config, clock);
  ASSERT_TRUE(nic.post(1, 0, 128, SignalId{0}, 2).ok());
  auto r = nic.wait_signal(0, SignalId{0}, 2, 1, 1'000'000);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(clock.now_ns(), 3'000);  // slept exactly until the landing
  EXPECT_FALSE(nic.fault().has_value());
}

TEST(EmulatedPacing, DroppedRankNeverDeliversAndTheWaitNamesIt) {
  ManualClock clock;
  auto nic = make_pacing(3, PacingConfig{}, clock);
  ASSERT_TRUE(nic.post(2, 0, 4096, SignalId{5}, 1).ok());
  ASSERT_TRUE(nic.post(0, 2, 4096, SignalId{5}, 1).ok());
  ASSERT_TRUE(nic.post(0, 1, 4096, SignalId{5}, 1).ok());
  nic.drop_rank(2);
  EXPECT_TRUE(nic.dropped(2));
  auto r = nic.wait_signal(0, SignalId{5}, 1, 2, 2'000'000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::timeout);
  EXPECT_NE(r.error().message.find("rank 2 did not deliver (dropped)"), std::string::npos)
      << r.error().message;
  EXPECT_EQ(clock.now_ns(), 2'000'000);  // bounded: gave up at the timeout
  ASSERT_TRUE(nic.fault().has_value());
  EXPECT_EQ(nic.fault()->rank, 2);
  // The put between live ranks landed; the two touching rank 2 never will.
  EXPECT_EQ(nic.signal(1, SignalId{5}), 1u);
  EXPECT_EQ(nic.in_flight(), 2u);
  EXPECT_FALSE(nic.next_completion_ns().has_value());
}

TEST(EmulatedPacing, StallDelaysInFlightAndLaterPutsOfThatNicOnly) {
  ManualClock clock;
  PacingConfig config;
  config.latency_ns = 1'000;
  auto nic = make_pacing(3, config, clock);
  ASSERT_TRUE(nic.post(0, 1, 256).ok());
  ASSERT_TRUE(nic.post(2, 1, 256).ok());
  nic.stall(0, 50'000);
  clock.advance(10'000);
  ASSERT_TRUE(nic.post(0, 1, 256).ok());
  clock.advance(1'000'000);
  auto done = nic.poll();
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].src, 2);
  EXPECT_EQ(done[0].complete_ns, 1'000);   // another NIC: unaffected
  EXPECT_EQ(done[1].complete_ns, 51'000);  // in flight when the stall began
  EXPECT_EQ(done[2].complete_ns, 51'000);  // posted during the stall: leaves when it ends
}

TEST(EmulatedPacing, BadShapesAreRefused) {
  ManualClock clock;
  EXPECT_FALSE(EmulatedPacing::create(0, PacingConfig{}, clock).ok());
  PacingConfig zero;
  zero.bytes_per_s = 0;
  EXPECT_FALSE(EmulatedPacing::create(2, zero, clock).ok());
  auto nic = make_pacing(2, PacingConfig{}, clock);
  auto r = nic.post(0, 2, 8);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("to rank 2 of 2"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace epkit::ep::network_leg
#endif
