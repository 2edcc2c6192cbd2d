// The network leg's request ring (ep/network_leg/request_queue.h): requests
// leave in ticket order and intact, a tiny ring laps many times, a full ring
// holds producers back until the consumer drains and times them out when it
// never does, and many producers finishing out of order lose nothing.
#ifdef EPKIT_WITH_CUDA
#include "ep/network_leg/request_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "ep/network_leg/leg.h"

namespace epkit::ep::network_leg {
namespace {

constexpr std::int64_t kLongNs = 10'000'000'000;  // far past any test's run time

// A request whose every field derives from (producer, n), so the consumer can
// tell a torn or misplaced request from an intact one.
PutRequest make_request(int producer, std::uint64_t n) {
  PutRequest r;
  r.peer = producer;
  r.channel = static_cast<std::uint32_t>(n % 13);
  r.dst_window = WindowId{static_cast<std::uint32_t>(n * 3 + 1)};
  r.src_window = WindowId{static_cast<std::uint32_t>(n * 5 + 2)};
  r.dst_offset = n * 7 + 3;
  r.src_offset = n * 11 + 4;
  r.bytes = n;
  r.signal = SignalId{static_cast<std::uint32_t>(producer * 17 + 5)};
  r.signal_add = r.peer + r.channel + r.dst_window.value + r.src_window.value + r.dst_offset +
                 r.src_offset + r.bytes + r.signal.value;  // the checksum
  return r;
}

bool same(const PutRequest& a, const PutRequest& b) {
  return a.peer == b.peer && a.channel == b.channel && a.dst_window == b.dst_window &&
         a.src_window == b.src_window && a.dst_offset == b.dst_offset &&
         a.src_offset == b.src_offset && a.bytes == b.bytes && a.signal == b.signal &&
         a.signal_add == b.signal_add;
}

bool intact(const PutRequest& r) {
  return same(r, make_request(r.peer, r.bytes));
}

// Producer 0 posts requests 0 to count - 1; false if one did not fit.
bool post_sequence(const RequestRing& ring, std::uint64_t count) {
  for (std::uint64_t n = 0; n < count; ++n) {
    if (post_request(ring, make_request(0, n), kLongNs) != PostStatus::posted) return false;
  }
  return true;
}

TEST(RequestQueue, DrainsOneProducersPostsInOrder) {
  RequestQueueStorage storage(8);
  const RequestRing ring = storage.ring();
  RequestConsumer consumer(ring);
  ASSERT_TRUE(post_sequence(ring, 5));
  EXPECT_EQ(consumer.pending(), 5u);
  std::vector<std::uint64_t> seen;
  EXPECT_EQ(consumer.drain(3, [&](const PutRequest& r) { seen.push_back(r.bytes); }), 3u);
  EXPECT_EQ(consumer.drain(100,
                           [&](const PutRequest& r) {
                             EXPECT_TRUE(intact(r));
                             seen.push_back(r.bytes);
                           }),
            2u);
  EXPECT_EQ(seen, (std::vector<std::uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(consumer.drain(100, [](const PutRequest&) { FAIL() << "nothing was posted"; }), 0u);
  EXPECT_EQ(consumer.pending(), 0u);
}

TEST(RequestQueue, DeviceLegAddressesTheSameRing) {
  RequestQueueStorage storage(4);
  DeviceLeg leg;
  storage.attach(leg);
  ASSERT_EQ(post_request(ring_of(leg), make_request(1, 9), kLongNs), PostStatus::posted);
  RequestConsumer consumer(storage.ring());
  std::vector<PutRequest> seen;
  EXPECT_EQ(consumer.drain(10, [&](const PutRequest& r) { seen.push_back(r); }), 1u);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_TRUE(same(seen[0], make_request(1, 9)));
  EXPECT_EQ(*leg.queue_head, 1u);
}

TEST(RequestQueue, TinyRingWrapsOverManyLaps) {
  RequestQueueStorage storage(4);
  const RequestRing ring = storage.ring();
  RequestConsumer consumer(ring);
  std::uint64_t next_posted = 0;
  std::uint64_t next_seen = 0;
  // Uneven batches, so the ring's fill point moves through every slot.
  for (int round = 0; round < 1000; ++round) {
    const int batch = 1 + round % 4;
    for (int i = 0; i < batch; ++i) {
      ASSERT_EQ(post_request(ring, make_request(0, next_posted++), kLongNs), PostStatus::posted);
    }
    consumer.drain(static_cast<std::size_t>(1 + round % 3), [&](const PutRequest& r) {
      EXPECT_TRUE(intact(r));
      EXPECT_EQ(r.bytes, next_seen++);
    });
    // The rest, so that the next batch (up to the whole ring) has room.
    consumer.drain(consumer.pending(),
                   [&](const PutRequest& r) { EXPECT_EQ(r.bytes, next_seen++); });
  }
  EXPECT_EQ(next_seen, next_posted);
  EXPECT_GT(next_posted / 4, 500u);  // hundreds of laps
}

TEST(RequestQueue, LaterTicketsPublishedFirstWaitForTheEarlierOne) {
  RequestQueueStorage storage(4);
  const RequestRing ring = storage.ring();
  RequestConsumer consumer(ring);
  // Three producers each hold one ticket (0, 1, 2) and finish out of order.
  std::vector<Claim> claims;
  for (int i = 0; i < 3; ++i) {
    claims.push_back(claim_slot(ring, 0));
    ASSERT_EQ(claims.back().status, PostStatus::posted);
  }
  for (int i : {2, 1}) {
    slot_of(ring, claims[i].ticket) = make_request(0, claims[i].ticket);
    publish_slot(ring, claims[i].ticket);
  }
  std::vector<std::uint64_t> seen;
  auto record = [&](const PutRequest& r) { seen.push_back(r.bytes); };
  EXPECT_EQ(consumer.drain(10, record), 0u);  // ticket 0 is still being written
  slot_of(ring, claims[0].ticket) = make_request(0, claims[0].ticket);
  publish_slot(ring, claims[0].ticket);
  EXPECT_EQ(consumer.drain(10, record), 3u);
  EXPECT_EQ(seen, (std::vector<std::uint64_t>{0, 1, 2}));
}

TEST(RequestQueue, FullRingHoldsTheProducerUntilTheConsumerDrains) {
  RequestQueueStorage storage(4);
  const RequestRing ring = storage.ring();
  RequestConsumer consumer(ring);
  ASSERT_TRUE(post_sequence(ring, 4));
  std::atomic<bool> done{false};
  PostStatus status = PostStatus::timed_out;
  std::thread producer([&] {
    status = post_request(ring, make_request(0, 4), kLongNs);
    done.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done.load()) << "a fifth request fitted a ring of four";
  std::vector<std::uint64_t> seen;
  EXPECT_EQ(consumer.drain(1, [&](const PutRequest& r) { seen.push_back(r.bytes); }), 1u);
  producer.join();
  EXPECT_EQ(status, PostStatus::posted);
  EXPECT_EQ(consumer.drain(10, [&](const PutRequest& r) { seen.push_back(r.bytes); }), 4u);
  EXPECT_EQ(seen, (std::vector<std::uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(consumer.abandoned(), 0u);
}

TEST(RequestQueue, ProducerTimesOutWhenNobodyDrains) {
  RequestQueueStorage storage(4);
  const RequestRing ring = storage.ring();
  ASSERT_TRUE(post_sequence(ring, 4));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(post_request(ring, make_request(0, 4), 20'000'000), PostStatus::timed_out);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(20));
  EXPECT_LT(waited, std::chrono::seconds(5));
  RequestConsumer consumer(ring);
  EXPECT_EQ(consumer.abandoned(), 1u);  // the consumer can tell the hole from a slow producer
  // What was posted before still drains; the abandoned ticket is where it stops.
  EXPECT_EQ(consumer.drain(10, [](const PutRequest& r) { EXPECT_TRUE(intact(r)); }), 4u);
  EXPECT_EQ(consumer.drain(10, [](const PutRequest&) { FAIL() << "drained the hole"; }), 0u);
}

TEST(RequestQueue, ClaimsOfNoSlotOrMoreThanTheRingAreRefusedWithoutATicket) {
  RequestQueueStorage storage(4);
  const RequestRing ring = storage.ring();
  EXPECT_EQ(claim_slot(ring, 1'000'000, 0).status, PostStatus::refused);
  EXPECT_EQ(claim_slot(ring, 1'000'000, 5).status, PostStatus::refused);
  RequestConsumer consumer(ring);
  EXPECT_EQ(consumer.pending(), 0u);  // no ticket taken: no hole
  EXPECT_EQ(consumer.abandoned(), 0u);
  ASSERT_EQ(post_request(ring, make_request(0, 0), 1'000'000), PostStatus::posted);
  EXPECT_EQ(consumer.drain(10, [](const PutRequest& r) { EXPECT_TRUE(intact(r)); }), 1u);

  // A ring of no slots (a DeviceLeg never attached) refuses, never divides by 0.
  RequestQueueStorage none(0);
  const RequestRing empty = none.ring();
  EXPECT_EQ(post_request(empty, make_request(0, 0), 1'000'000), PostStatus::refused);
  RequestConsumer idle(empty);
  EXPECT_EQ(idle.drain(10, [](const PutRequest&) { FAIL() << "drained an empty ring"; }), 0u);
}

TEST(RequestQueue, ManyProducersOutOfOrderEachRequestOnceAndIntact) {
  constexpr int kProducers = 4;
  constexpr std::uint64_t kPerProducer = 2000;
  RequestQueueStorage storage(16);  // small, so producers keep waiting for room
  const RequestRing ring = storage.ring();
  RequestConsumer consumer(ring);
  std::atomic<int> failures{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      std::mt19937 random(static_cast<unsigned>(p + 1));
      for (std::uint64_t n = 0; n < kPerProducer;) {
        // Claim two tickets in one call (as a warp's leader does), then
        // write and publish them in a random order with a pause between, so
        // publications land out of ticket order within and across threads.
        const Claim claim = claim_slot(ring, kLongNs, 2);
        if (claim.status != PostStatus::posted) {
          failures.fetch_add(1);
          return;
        }
        std::uint64_t a = claim.ticket;
        std::uint64_t b = claim.ticket + 1;
        if (random() % 2) std::swap(a, b);
        slot_of(ring, a) = make_request(p, n++);
        if (random() % 4 == 0) std::this_thread::yield();
        publish_slot(ring, a);
        slot_of(ring, b) = make_request(p, n++);
        publish_slot(ring, b);
      }
    });
  }
  std::vector<std::vector<int>> seen(kProducers, std::vector<int>(kPerProducer, 0));
  std::uint64_t total = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (total < kProducers * kPerProducer && std::chrono::steady_clock::now() < deadline) {
    total += consumer.drain(64, [&](const PutRequest& r) {
      if (!intact(r) || r.peer < 0 || r.peer >= kProducers || r.bytes >= kPerProducer) {
        failures.fetch_add(1);
        return;
      }
      ++seen[r.peer][r.bytes];
    });
  }
  for (auto& t : producers) t.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_EQ(total, kProducers * kPerProducer);
  for (int p = 0; p < kProducers; ++p) {
    EXPECT_TRUE(std::all_of(seen[p].begin(), seen[p].end(), [](int c) { return c == 1; }))
        << "producer " << p << ": a request lost or seen twice";
  }
  EXPECT_EQ(consumer.pending(), 0u);
  EXPECT_EQ(consumer.abandoned(), 0u);
}

}  // namespace
}  // namespace epkit::ep::network_leg
#endif
