// The network leg's host-side pieces that need no GPU: the interface's
// layout and names, and the emulated NIC's pacing model (cap, latency,
// reordering, faults) on a clock the test moves. Ring mode's memory is
// tests/ep/ring_memory_test.cc's.
#ifdef EPKIT_WITH_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ep/network_leg/emulated_pacing.h"
#include "ep/network_leg/leg.h"

namespace epkit::ep::network_leg {
namespace {

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

TEST(EmulatedPacing, ACapChangedBetweenPutsPacesTheNextOnes) {
  ManualClock clock;
  PacingConfig config;
  config.bytes_per_s = 1e9;
  config.burst_bytes = 0;
  config.latency_ns = 0;
  auto nic = make_pacing(2, config, clock);
  // 1 MB at 1 GB/s: lands after 1 ms.
  ASSERT_TRUE(nic.post(0, 1, 1'000'000).ok());
  clock.advance(1'000'000);
  EXPECT_EQ(nic.poll().size(), 1u);
  // At 10 GB/s the next 1 MB takes 0.1 ms; the one paced before the change
  // kept its time.
  ASSERT_TRUE(nic.set_bytes_per_s(10e9).ok());
  ASSERT_TRUE(nic.post(0, 1, 1'000'000).ok());
  clock.advance(99'000);
  EXPECT_TRUE(nic.poll().empty());
  clock.advance(1'000);
  EXPECT_EQ(nic.poll().size(), 1u);
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
    auto r = nic.set_bytes_per_s(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message.find("positive and finite"), std::string::npos);
  }
}

TEST(EmulatedPacing, TakeIdleReportsTheLostCapacityAndTheEmptyStretches) {
  ManualClock clock;
  PacingConfig config;
  config.bytes_per_s = 1e9;
  config.burst_bytes = 1'000'000;
  config.latency_ns = 0;
  auto nic = make_pacing(2, config, clock);
  // The full bucket sends 1 MB at once; 3 ms later it has earned 3 MB, of
  // which the 1 MB that refills it is not lost: 2 ms at the cap is.
  ASSERT_TRUE(nic.post(0, 1, 1'000'000).ok());
  clock.advance(3'000'000);
  ASSERT_TRUE(nic.post(0, 1, 2'000'000).ok());  // leaves at 4 ms
  // Queued behind it: no stretch, nothing lost.
  ASSERT_TRUE(nic.post(0, 1, 1'000'000).ok());  // leaves at 5 ms
  auto idle = nic.take_idle(0);
  EXPECT_EQ(idle.lost_ns, 2'000'000);
  ASSERT_EQ(idle.gaps.size(), 1u);
  EXPECT_EQ(idle.gaps[0], std::make_pair(std::int64_t{0}, std::int64_t{3'000'000}));
  // Taken means reset; a stretch of 5 us is too short to list.
  clock.advance(2'005'000);
  ASSERT_TRUE(nic.post(0, 1, 1'000).ok());
  idle = nic.take_idle(0);
  EXPECT_EQ(idle.lost_ns, 0);
  EXPECT_TRUE(idle.gaps.empty());
  // Rank 1 never sent: its whole time, with its bucket full, is lost.
  EXPECT_EQ(nic.take_idle(1).lost_ns, 5'005'000);
  EXPECT_TRUE(nic.take_idle(7).gaps.empty());  // no such rank
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
