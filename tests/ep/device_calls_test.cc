// The network leg's device calls (ep/network_leg/device_calls.h) run from
// host threads: the same functions the kernels run, against the host's
// RequestConsumer. Many producers put whole requests that leave in each
// producer's order; bad arguments are refused without a ticket; a full ring
// times out; wait sees a signal another thread wrote, with its payload; and
// flush returns only once the consumer has read the sources, not when the
// requests merely left the ring.
#ifdef EPKIT_WITH_CUDA
#include "ep/network_leg/device_calls.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "ep/network_leg/leg.h"
#include "ep/network_leg/request_queue.h"

namespace epkit::ep::network_leg {
namespace {

constexpr std::int64_t kLongNs = 10'000'000'000;  // far past any test's run time
constexpr std::int64_t kShortNs = 20'000'000;

// A leg of `world` ranks with `signals` signals, its ring in host memory.
struct HostLeg {
  explicit HostLeg(std::uint32_t slots, int world = 4, std::uint32_t signals = 8)
      : storage(slots), signal_words(std::make_unique<std::uint64_t[]>(signals)) {
    leg.rank = 0;
    leg.world_size = world;
    leg.signals = signal_words.get();
    leg.num_signals = signals;
    storage.attach(leg);
  }
  RequestQueueStorage storage;
  std::unique_ptr<std::uint64_t[]> signal_words;
  DeviceLeg leg;
};

// Producer p's n-th put: every field derives from (p, n), so the consumer
// tells a torn or misplaced request from an intact one.
PostStatus put_nth(const DeviceLeg& leg, int p, std::uint64_t n, FlushMark* mark = nullptr,
                   std::int64_t timeout_ns = kLongNs) {
  return leg_put(leg, p, WindowId{static_cast<std::uint32_t>(n % 7)}, n * 3, WindowId{1},
                 n * 5 + static_cast<std::uint64_t>(p), n + 1,
                 SignalId{static_cast<std::uint32_t>(p)}, n + 2, timeout_ns, mark,
                 static_cast<std::uint32_t>(p));
}

bool intact(const PutRequest& r) {
  const std::uint64_t n = r.bytes - 1;
  return r.bytes > 0 && r.channel == static_cast<std::uint32_t>(r.peer) &&
         r.dst_window == WindowId{static_cast<std::uint32_t>(n % 7)} && r.dst_offset == n * 3 &&
         r.src_window == WindowId{1} &&
         r.src_offset == n * 5 + static_cast<std::uint64_t>(r.peer) &&
         r.signal == SignalId{static_cast<std::uint32_t>(r.peer)} && r.signal_add == n + 2;
}

TEST(DeviceCalls, ManyProducersPutWholeRequestsInEachProducersOrder) {
  constexpr int kProducers = 4;
  constexpr std::uint64_t kPerProducer = 3000;
  HostLeg host(16, kProducers);  // small, so producers keep waiting for room
  RequestConsumer consumer(host.storage.ring());
  std::atomic<int> failures{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (std::uint64_t n = 0; n < kPerProducer; ++n) {
        if (put_nth(host.leg, p, n) != PostStatus::posted) failures.fetch_add(1);
      }
    });
  }
  std::vector<std::uint64_t> next(kProducers, 0);
  std::uint64_t total = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (total < kProducers * kPerProducer && std::chrono::steady_clock::now() < deadline) {
    total += consumer.drain(64, [&](const PutRequest& r) {
      // One producer's tickets grow with its calls, so its puts leave in order.
      if (!intact(r) || r.peer < 0 || r.peer >= kProducers || r.bytes - 1 != next[r.peer]++) {
        failures.fetch_add(1);
      }
    });
  }
  for (auto& t : producers) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(total, kProducers * kPerProducer);
  EXPECT_EQ(consumer.pending(), 0u);
  EXPECT_EQ(consumer.abandoned(), 0u);
}

TEST(DeviceCalls, LeadersPostTheirBatchesInOneClaimEach) {
  constexpr int kLeaders = 3;
  constexpr std::uint32_t kBatch = 5;
  constexpr int kRounds = 500;
  HostLeg host(8, kLeaders);
  RequestConsumer consumer(host.storage.ring());
  std::atomic<int> failures{0};
  std::vector<std::thread> leaders;
  for (int p = 0; p < kLeaders; ++p) {
    leaders.emplace_back([&, p] {
      for (int round = 0; round < kRounds; ++round) {
        PutRequest batch[kBatch];
        for (std::uint32_t i = 0; i < kBatch; ++i) {
          batch[i].peer = p;
          batch[i].signal = SignalId{i};
          batch[i].signal_add = 1;
          batch[i].bytes = static_cast<std::uint64_t>(round) * kBatch + i;  // 0: a bare signal
        }
        if (leg_post_many(host.leg, batch, kBatch, kLongNs) != PostStatus::posted) {
          failures.fetch_add(1);
        }
      }
    });
  }
  // One claim of kBatch tickets: a batch's requests leave back to back,
  // never interleaved with another leader's.
  std::vector<PutRequest> seen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (seen.size() < kLeaders * kRounds * kBatch && std::chrono::steady_clock::now() < deadline) {
    consumer.drain(64, [&](const PutRequest& r) { seen.push_back(r); });
  }
  for (auto& t : leaders) t.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_EQ(seen.size(), kLeaders * kRounds * kBatch);
  for (std::size_t i = 0; i < seen.size(); i += kBatch) {
    for (std::uint32_t j = 0; j < kBatch; ++j) {
      EXPECT_EQ(seen[i + j].peer, seen[i].peer) << "batch at " << i << " interleaved";
      EXPECT_EQ(seen[i + j].bytes, seen[i].bytes + j);
      EXPECT_EQ(seen[i + j].signal, SignalId{j});
    }
  }
}

TEST(DeviceCalls, BadArgumentsAreRefusedWithoutATicket) {
  HostLeg host(4, /*world=*/2, /*signals=*/3);
  const DeviceLeg& leg = host.leg;
  RequestConsumer consumer(host.storage.ring());
  auto put = [&](int peer, std::uint64_t bytes, std::uint32_t signal, std::uint64_t add) {
    return leg_put(leg, peer, WindowId{}, 0, WindowId{}, 0, bytes, SignalId{signal}, add, kShortNs);
  };
  EXPECT_EQ(put(-1, 8, 0, 1), PostStatus::refused);
  EXPECT_EQ(put(2, 8, 0, 1), PostStatus::refused);  // outside a world of 2
  EXPECT_EQ(put(1, 8, 3, 1), PostStatus::refused);  // signal outside an array of 3
  EXPECT_EQ(put(1, 0, 0, 0), PostStatus::refused);  // nothing to carry
  EXPECT_EQ(leg_signal(leg, 1, SignalId{0}, 0, kShortNs), PostStatus::refused);
  PutRequest batch[2];
  batch[0].peer = 1;
  batch[0].bytes = 4;
  batch[1].peer = 5;  // one bad request refuses the lot
  batch[1].bytes = 4;
  EXPECT_EQ(leg_post_many(leg, batch, 2, kShortNs), PostStatus::refused);
  EXPECT_EQ(leg_post_many(leg, batch, 0, kShortNs), PostStatus::refused);
  EXPECT_EQ(leg_post_many(leg, nullptr, 1, kShortNs), PostStatus::refused);
  PutRequest many[5];
  for (auto& r : many) {
    r.peer = 1;
    r.bytes = 1;
  }
  EXPECT_EQ(leg_post_many(leg, many, 5, kShortNs), PostStatus::refused);  // a ring of 4
  EXPECT_EQ(consumer.pending(), 0u);
  EXPECT_EQ(consumer.abandoned(), 0u);
  // A signal with no bytes, and bytes with no signal (whose index is unused),
  // are both requests.
  EXPECT_EQ(put(1, 8, 99, 0), PostStatus::posted);
  EXPECT_EQ(leg_signal(leg, 0, SignalId{2}, 3, kShortNs), PostStatus::posted);
  EXPECT_EQ(consumer.drain(10, [](const PutRequest&) {}), 2u);

  // A leg without a ring (GIN's, or one never attached) refuses every call.
  DeviceLeg bare;
  bare.world_size = 2;
  bare.num_signals = 3;
  EXPECT_EQ(leg_put(bare, 1, WindowId{}, 0, WindowId{}, 0, 8, SignalId{0}, 1, kShortNs),
            PostStatus::refused);
  EXPECT_EQ(leg_flush(bare, FlushMark{}, kShortNs), PostStatus::refused);
  EXPECT_FALSE(leg_wait(bare, SignalId{0}, 0, kShortNs));  // no signal array
}

TEST(DeviceCalls, PutTimesOutOnARingNobodyDrains) {
  HostLeg host(2);
  ASSERT_EQ(put_nth(host.leg, 0, 0), PostStatus::posted);
  ASSERT_EQ(put_nth(host.leg, 0, 1), PostStatus::posted);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(put_nth(host.leg, 0, 2, nullptr, kShortNs), PostStatus::timed_out);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::nanoseconds(kShortNs));
  EXPECT_LT(waited, std::chrono::seconds(5));
  RequestConsumer consumer(host.storage.ring());
  EXPECT_EQ(consumer.abandoned(), 1u);
  EXPECT_EQ(consumer.drain(10, [](const PutRequest& r) { EXPECT_TRUE(intact(r)); }), 2u);
}

TEST(DeviceCalls, WaitSeesASignalAnotherThreadWroteAndItsPayload) {
  HostLeg host(4);
  std::uint64_t payload = 0;
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    payload = 42;  // plain: the release on the signal publishes it
    std::atomic_ref<std::uint64_t>(host.signal_words[3]).store(2, std::memory_order_release);
  });
  EXPECT_TRUE(leg_wait(host.leg, SignalId{3}, 2, kLongNs));
  EXPECT_EQ(payload, 42u);
  writer.join();
  // Monotone counters: a value already passed is met at once.
  EXPECT_TRUE(leg_wait(host.leg, SignalId{3}, 1, 0));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(leg_wait(host.leg, SignalId{3}, 3, kShortNs));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::nanoseconds(kShortNs));
  EXPECT_FALSE(leg_wait(host.leg, SignalId{8}, 0, kLongNs));  // outside the array: at once
}

TEST(DeviceCalls, FlushWaitsForTheSourceReadNotForTheRingsHead) {
  HostLeg host(8);
  RequestConsumer consumer(host.storage.ring());
  FlushMark mark;
  EXPECT_EQ(leg_flush(host.leg, mark, 0), PostStatus::posted);  // nothing posted
  for (std::uint64_t n = 0; n < 3; ++n)
    ASSERT_EQ(put_nth(host.leg, 1, n, &mark), PostStatus::posted);
  EXPECT_EQ(mark.end, 3u);
  std::vector<std::uint64_t> tickets;
  EXPECT_EQ(
      consumer.drain_owing(10, [&](std::uint64_t t, const PutRequest&) { tickets.push_back(t); }),
      3u);
  EXPECT_EQ(tickets, (std::vector<std::uint64_t>{0, 1, 2}));
  EXPECT_EQ(*host.leg.queue_head, 3u);  // the requests left the ring...
  EXPECT_EQ(leg_flush(host.leg, mark, kShortNs), PostStatus::timed_out);  // ...their bytes did not
  // Read out of order: done stops at the lowest ticket still owed.
  consumer.source_read(2);
  consumer.source_read(0);
  EXPECT_EQ(consumer.done(), 1u);
  EXPECT_EQ(leg_flush(host.leg, FlushMark{1}, 0), PostStatus::posted);
  EXPECT_EQ(leg_flush(host.leg, mark, 0), PostStatus::timed_out);
  consumer.source_read(1);
  EXPECT_EQ(consumer.done(), 3u);
  EXPECT_EQ(leg_flush(host.leg, mark, 0), PostStatus::posted);
  // A consumer that reads inside drain leaves nothing owed.
  ASSERT_EQ(put_nth(host.leg, 1, 3, &mark), PostStatus::posted);
  EXPECT_EQ(leg_flush(host.leg, mark, 0), PostStatus::timed_out);
  EXPECT_EQ(consumer.drain(10, [](const PutRequest&) {}), 1u);
  EXPECT_EQ(leg_flush(host.leg, mark, 0), PostStatus::posted);
  // A ring without the done word offers no flush.
  DeviceLeg no_done = host.leg;
  no_done.queue_done = nullptr;
  EXPECT_EQ(leg_flush(no_done, mark, 0), PostStatus::refused);
}

TEST(DeviceCalls, AfterFlushEveryPutOfTheCallerHasBeenRead) {
  constexpr int kProducers = 3;
  constexpr std::uint64_t kRounds = 300;
  constexpr std::uint64_t kPerRound = 4;
  HostLeg host(8, kProducers);
  RequestConsumer consumer(host.storage.ring());
  // read[p][n]: the consumer has read producer p's put n (its "source").
  std::vector<std::unique_ptr<std::atomic<bool>[]>> read;
  for (int p = 0; p < kProducers; ++p) {
    read.push_back(std::make_unique<std::atomic<bool>[]>(kRounds * kPerRound));
  }
  std::atomic<int> failures{0};
  std::atomic<int> finished{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      FlushMark mark;
      for (std::uint64_t round = 0; round < kRounds; ++round) {
        for (std::uint64_t i = 0; i < kPerRound; ++i) {
          if (put_nth(host.leg, p, round * kPerRound + i, &mark) != PostStatus::posted) {
            failures.fetch_add(1);
          }
        }
        if (leg_flush(host.leg, mark, kLongNs) != PostStatus::posted) failures.fetch_add(1);
        for (std::uint64_t n = 0; n < (round + 1) * kPerRound; ++n) {
          if (!read[p][n].load(std::memory_order_relaxed)) failures.fetch_add(1);
        }
      }
      finished.fetch_add(1);
    });
  }
  // The consumer reads each source some steps after draining it, in a
  // shuffled order, as a proxy whose puts land out of order does.
  std::mt19937 random(7);
  std::vector<std::pair<std::uint64_t, PutRequest>> owed;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (finished.load() < kProducers && std::chrono::steady_clock::now() < deadline) {
    consumer.drain_owing(4, [&](std::uint64_t t, const PutRequest& r) { owed.emplace_back(t, r); });
    std::shuffle(owed.begin(), owed.end(), random);
    const std::size_t now = owed.empty() ? 0 : 1 + random() % owed.size();
    for (std::size_t i = 0; i < now; ++i) {
      const auto& [ticket, r] = owed.back();
      read[r.peer][r.bytes - 1].store(true, std::memory_order_relaxed);
      consumer.source_read(ticket);
      owed.pop_back();
    }
  }
  for (auto& t : producers) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(finished.load(), kProducers);
}

}  // namespace
}  // namespace epkit::ep::network_leg
#endif
