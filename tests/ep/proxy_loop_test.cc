// The emulated backend's host proxy (ep/network_leg/proxy_loop.h) on the
// CPU: two fake ranks post puts with signals into their request rings; the
// proxy lands the bytes, then the signals, when the pacing model says, and
// names a dropped rank in its fault.
#ifdef EPKIT_WITH_CUDA
#include "ep/network_leg/proxy_loop.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ep/network_leg/device_calls.h"
#include "ep/network_leg/emulated_pacing.h"
#include "ep/network_leg/leg.h"
#include "ep/network_leg/request_queue.h"
#include "ep/put_request.h"

namespace epkit::ep::network_leg {
namespace {

constexpr std::int64_t kLongNs = 10'000'000'000;

// Two ranks, each with one window (window 0) of bytes and a signal array, in
// host memory, and a request ring; the hooks memcpy between them and log
// what they did, so the test sees bytes land before their signal.
struct FakeRanks {
  static constexpr int kRanks = 2;
  static constexpr std::size_t kWindowBytes = 256;
  std::array<std::vector<std::uint8_t>, kRanks> windows;
  std::array<std::array<std::uint64_t, 4>, kRanks> signals{};
  std::vector<RequestQueueStorage> queues;
  std::vector<std::string> log;

  FakeRanks() {
    for (int r = 0; r < kRanks; ++r) {
      windows[r].assign(kWindowBytes, 0);
      for (std::size_t i = 0; i < kWindowBytes; ++i) {
        windows[r][i] = static_cast<std::uint8_t>(r * 100 + i % 97);
      }
      queues.emplace_back(8);
    }
  }

  std::vector<RequestRing> rings() {
    std::vector<RequestRing> out;
    for (auto& q : queues) out.push_back(q.ring());
    return out;
  }

  ProxyHooks hooks() {
    ProxyHooks h;
    h.copy = [this](int src, const PutRequest& r) -> Result<void> {
      if (r.dst_offset + r.bytes > kWindowBytes || r.src_offset + r.bytes > kWindowBytes) {
        return make_error(ErrorCode::invalid, "put outside the window");
      }
      std::memcpy(windows[r.peer].data() + r.dst_offset, windows[src].data() + r.src_offset,
                  r.bytes);
      log.push_back(fmt::format("copy {}->{}", src, r.peer));
      return {};
    };
    h.write_signal = [this](int dst, SignalId s, std::uint64_t value) -> Result<void> {
      signals[dst][s.value] = value;
      log.push_back(fmt::format("signal {}[{}]={}", dst, s.value, value));
      return {};
    };
    return h;
  }
};

PutRequest put(int peer, std::uint64_t dst_offset, std::uint64_t src_offset, std::uint64_t bytes,
               std::uint32_t signal, std::uint64_t add) {
  return testing::make_put(peer, dst_offset, src_offset, bytes, signal, add);
}

// Two fake ranks, their proxy, and a clock the test moves.
class ProxyLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PacingConfig config;
    config.latency_ns = 2000;
    auto made = EmulatedPacing::create(FakeRanks::kRanks, config, clock);
    ASSERT_TRUE(made.ok()) << made.error().message;
    pacing.emplace(std::move(made).value());
    proxy.emplace(ranks.rings(), *pacing, ranks.hooks());
  }
  // Rank `rank`'s device view of its ring (its producer's calls).
  DeviceLeg leg_of(int rank) {
    DeviceLeg leg;
    leg.world_size = FakeRanks::kRanks;
    leg.num_signals = 4;
    ranks.queues[static_cast<std::size_t>(rank)].attach(leg);
    return leg;
  }
  PostStatus post(int from, const PutRequest& request) {
    return post_request(ranks.queues[static_cast<std::size_t>(from)].ring(), request, kLongNs);
  }

  FakeRanks ranks;
  ManualClock clock;
  std::optional<EmulatedPacing> pacing;
  std::optional<ProxyLoop> proxy;
};

TEST_F(ProxyLoopTest, BytesAndSignalsLandWhenThePacingModelSays) {
  ASSERT_EQ(post(0, put(1, 0, 16, 32, 1, 1)), PostStatus::posted);
  ASSERT_EQ(post(0, put(1, 64, 100, 8, 1, 1)), PostStatus::posted);
  ASSERT_EQ(post(1, put(0, 128, 200, 16, 2, 5)), PostStatus::posted);
  ASSERT_EQ(post(1, put(0, 0, 0, 0, 3, 7)),
            PostStatus::posted);  // a bare signal
  const auto expect_0 = ranks.windows[0];
  const auto expect_1 = ranks.windows[1];

  auto first = proxy->step();
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(first.value().posted, 4u);
  EXPECT_EQ(first.value().landed, 0u);  // in flight for the latency
  EXPECT_EQ(proxy->in_flight(), 4u);
  EXPECT_EQ(ranks.signals[1][1], 0u);

  clock.advance(1'000'000);
  auto second = proxy->step();
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_EQ(second.value().landed, 4u);
  EXPECT_EQ(proxy->in_flight(), 0u);
  EXPECT_FALSE(proxy->fault().has_value());

  EXPECT_EQ(0, std::memcmp(ranks.windows[1].data(), expect_0.data() + 16, 32));
  EXPECT_EQ(0, std::memcmp(ranks.windows[1].data() + 64, expect_0.data() + 100, 8));
  EXPECT_EQ(0, std::memcmp(ranks.windows[0].data() + 128, expect_1.data() + 200, 16));
  EXPECT_EQ(ranks.windows[1][32], expect_1[32]);  // nothing past the put
  EXPECT_EQ(ranks.signals[1][1], 2u);             // two puts of one each
  EXPECT_EQ(ranks.signals[0][2], 5u);
  EXPECT_EQ(ranks.signals[0][3], 7u);
  // Every put's bytes land before its signal, and a signal's value counts
  // only puts already applied.
  const std::vector<std::string> want = {"copy 0->1", "signal 1[1]=1", "copy 0->1",
                                         "signal 1[1]=2"};
  std::vector<std::string> from_0;
  for (const auto& line : ranks.log) {
    if (line.find("0->1") != std::string::npos || line.rfind("signal 1", 0) == 0) {
      from_0.push_back(line);
    }
  }
  EXPECT_EQ(from_0, want);
}

// flush (ep/network_leg/device_calls.h) through the proxy: the step that
// drains a put moves the ring's head past it, but the source is read only
// when the put lands, and only then does the sender's flush return. A bare
// signal has no source and flushes once drained; a put to a dropped rank
// never does.
TEST_F(ProxyLoopTest, FlushReturnsOnceThePutHasLandedNotWhenItWasDrained) {
  DeviceLeg leg = leg_of(0);
  FlushMark put_mark;
  ASSERT_EQ(leg_put(leg, 1, WindowId{}, 0, WindowId{}, 16, 32, SignalId{1}, 1, kLongNs, &put_mark),
            PostStatus::posted);
  FlushMark signal_mark;
  ASSERT_EQ(leg_signal(leg, 1, SignalId{2}, 1, kLongNs, &signal_mark), PostStatus::posted);
  ASSERT_TRUE(proxy->step().ok());
  EXPECT_EQ(*leg.queue_head, 2u);                                 // both left the ring
  EXPECT_EQ(leg_flush(leg, put_mark, 0), PostStatus::timed_out);  // the put's bytes are not read
  EXPECT_EQ(*leg.queue_done, 0u);
  clock.advance(1'000'000);
  ASSERT_TRUE(proxy->step().ok());
  EXPECT_EQ(ranks.signals[1][1], 1u);
  EXPECT_EQ(leg_flush(leg, put_mark, 0), PostStatus::posted);
  EXPECT_EQ(leg_flush(leg, signal_mark, 0), PostStatus::posted);

  pacing->drop_rank(1);
  FlushMark dropped_mark;
  ASSERT_EQ(
      leg_put(leg, 1, WindowId{}, 0, WindowId{}, 0, 8, SignalId{1}, 1, kLongNs, &dropped_mark),
      PostStatus::posted);
  clock.advance(1'000'000);
  ASSERT_TRUE(proxy->step().ok());
  EXPECT_EQ(leg_flush(leg, dropped_mark, 1'000'000), PostStatus::timed_out);
  EXPECT_TRUE(proxy->fault().has_value());
}

// A copy that is only queued when the hook returns (a GPU copy engine):
// the put's ticket counts as done, and the producer's flush returns, only
// once the fence marked after its copy has completed, not when it landed.
TEST_F(ProxyLoopTest, QueuedCopyHoldsFlushUntilItsFenceCompletes) {
  std::uint64_t marks = 0;
  std::uint64_t completed = 0;
  auto hooks = ranks.hooks();
  hooks.fence = [&]() -> Result<std::uint64_t> { return ++marks; };
  hooks.completed = [&]() -> Result<std::uint64_t> { return completed; };
  ProxyLoop queued(ranks.rings(), *pacing, std::move(hooks));
  DeviceLeg leg = leg_of(0);
  FlushMark first;
  ASSERT_EQ(leg_put(leg, 1, WindowId{}, 0, WindowId{}, 16, 32, SignalId{1}, 1, kLongNs, &first),
            PostStatus::posted);
  ASSERT_TRUE(queued.step().ok());
  clock.advance(1'000'000);
  ASSERT_TRUE(queued.step().ok());  // landed: copied, signalled, fence 1 marked
  EXPECT_EQ(ranks.signals[1][1], 1u);
  EXPECT_EQ(marks, 1u);
  EXPECT_EQ(leg_flush(leg, first, 0), PostStatus::timed_out);
  FlushMark second;
  ASSERT_EQ(leg_put(leg, 1, WindowId{}, 64, WindowId{}, 0, 8, SignalId{1}, 1, kLongNs, &second),
            PostStatus::posted);
  ASSERT_TRUE(queued.step().ok());
  clock.advance(1'000'000);
  ASSERT_TRUE(queued.step().ok());  // fence 2 marked after the second copy
  EXPECT_EQ(marks, 2u);
  completed = 1;
  ASSERT_TRUE(queued.step().ok());
  EXPECT_EQ(leg_flush(leg, first, 0), PostStatus::posted);
  EXPECT_EQ(leg_flush(leg, second, 0), PostStatus::timed_out);
  completed = 2;
  ASSERT_TRUE(queued.step().ok());
  EXPECT_EQ(leg_flush(leg, second, 0), PostStatus::posted);
  EXPECT_EQ(marks, 2u);  // no fence for a step that copied nothing
}

// A fence that fails (the copy engine's stream broke) is a fault, not a
// flush that returns.
TEST_F(ProxyLoopTest, FailedFenceIsAFault) {
  auto hooks = ranks.hooks();
  hooks.fence = []() -> Result<std::uint64_t> {
    return make_error(ErrorCode::cuda, "cudaEventRecord of a fence: an illegal address");
  };
  hooks.completed = []() -> Result<std::uint64_t> { return 0; };
  ProxyLoop queued(0, FakeRanks::kRanks, ranks.queues[0].ring(), *pacing, std::move(hooks));
  ASSERT_EQ(post(0, put(1, 0, 0, 8, 1, 1)), PostStatus::posted);
  ASSERT_TRUE(queued.step().ok());
  clock.advance(1'000'000);
  auto failed = queued.step();
  ASSERT_FALSE(failed.ok());
  ASSERT_TRUE(queued.fault().has_value());
  EXPECT_EQ(queued.fault()->rank, 0);
  EXPECT_NE(queued.fault()->reason.find("illegal address"), std::string::npos);
}

// A producer that moves its own bytes: the loop only tells it (land) with
// the ticket when the put has crossed, never copies or signals, and counts
// the source read (flush passes).
TEST_F(ProxyLoopTest, LandHookReplacesTheCopyAndTheSignal) {
  std::vector<std::pair<int, std::uint64_t>> landed;
  auto hooks = ranks.hooks();
  hooks.land = [&](int src, std::uint64_t ticket, const PutRequest&) -> Result<void> {
    landed.emplace_back(src, ticket);
    return {};
  };
  ProxyLoop moved(ranks.rings(), *pacing, std::move(hooks));
  DeviceLeg leg = leg_of(0);
  FlushMark mark;
  ASSERT_EQ(leg_put(leg, 1, WindowId{}, 0, WindowId{}, 16, 32, SignalId{1}, 1, kLongNs, &mark),
            PostStatus::posted);
  ASSERT_EQ(leg_signal(leg, 1, SignalId{2}, 1, kLongNs, &mark), PostStatus::posted);
  const auto before = ranks.windows[1];
  ASSERT_TRUE(moved.step().ok());
  EXPECT_TRUE(landed.empty());
  clock.advance(1'000'000);
  ASSERT_TRUE(moved.step().ok());
  const std::vector<std::pair<int, std::uint64_t>> want = {{0, 0}, {0, 1}};
  EXPECT_EQ(landed, want);
  EXPECT_EQ(ranks.windows[1], before);
  EXPECT_EQ(ranks.signals[1][1], 0u);
  EXPECT_TRUE(ranks.log.empty());
  EXPECT_EQ(leg_flush(leg, mark, 0), PostStatus::posted);
}

TEST_F(ProxyLoopTest, DroppedRankIsNamedAndItsPutsNeverLand) {
  pacing->drop_rank(1);

  ASSERT_EQ(post(0, put(1, 0, 0, 32, 1, 1)), PostStatus::posted);
  clock.advance(1'000'000);
  for (int i = 0; i < 3; ++i) {
    auto s = proxy->step();
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ(s.value().landed, 0u);
    clock.advance(1'000'000);
  }
  ASSERT_TRUE(proxy->fault().has_value());
  EXPECT_EQ(proxy->fault()->rank, 1);  // the dead rank, not rank 0 whose put is stuck
  EXPECT_NE(proxy->fault()->reason.find("rank 1 dropped"), std::string::npos)
      << proxy->fault()->reason;
  EXPECT_EQ(ranks.signals[1][1], 0u);
  EXPECT_TRUE(ranks.log.empty());
}

TEST_F(ProxyLoopTest, PutToARankOutsideTheWorldIsAFaultOfItsSender) {
  ASSERT_EQ(post(1, put(7, 0, 0, 8, 0, 1)), PostStatus::posted);
  auto s = proxy->step();
  ASSERT_TRUE(s.ok()) << s.error().message;
  ASSERT_TRUE(proxy->fault().has_value());
  EXPECT_EQ(proxy->fault()->rank, 1);
  EXPECT_EQ(proxy->in_flight(), 0u);
}

TEST_F(ProxyLoopTest, OneRanksLoopDrainsOnlyItsRingAndChecksEachRequest) {
  auto hooks = ranks.hooks();
  hooks.check = [](int src, const PutRequest& r) -> Result<void> {
    if (r.bytes > 64) return make_error(ErrorCode::invalid, fmt::format("rank {}: too long", src));
    return {};
  };
  ProxyLoop mine(0, FakeRanks::kRanks, ranks.queues[0].ring(), *pacing, std::move(hooks));
  ASSERT_EQ(post(0, put(1, 0, 0, 8, 1, 1)), PostStatus::posted);
  ASSERT_EQ(post(0, put(1, 0, 0, 100, 1, 1)), PostStatus::posted);  // refused by the check
  ASSERT_EQ(post(1, put(0, 0, 0, 8, 2, 1)), PostStatus::posted);    // another rank's ring

  auto s = mine.step();
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s.value().posted, 2u);
  EXPECT_EQ(mine.in_flight(), 1u);
  EXPECT_EQ(mine.pending(), 0u);  // rank 1's ticket is not this loop's
  ASSERT_TRUE(mine.fault().has_value());
  EXPECT_EQ(mine.fault()->rank, 0);
  EXPECT_NE(mine.fault()->reason.find("too long"), std::string::npos) << mine.fault()->reason;

  clock.advance(1'000'000);
  s = mine.step();
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s.value().landed, 1u);
  EXPECT_EQ(ranks.signals[1][1], 1u);
  EXPECT_EQ(ranks.signals[0][2], 0u);
  EXPECT_EQ(ranks.log, (std::vector<std::string>{"copy 0->1", "signal 1[1]=1"}));
}

}  // namespace
}  // namespace epkit::ep::network_leg
#endif
