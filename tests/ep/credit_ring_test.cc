// The credit ring (ep/network_leg/credit_ring.h) over the emulated NIC, ranks
// as threads of this process: every message lands bitwise in order of
// consumption although puts land out of order (the NIC's reordering), rings
// of one and two slots wrap around hundreds of times, a sender is never more
// than `slots` messages ahead of what its receiver consumed (back-pressure,
// with a receiver that stalls), credits in batches still let both ends
// finish, rows cross in chunks call after call (RowStream), and a peer the
// network lost ends every wait on it within the bound.
#ifdef EPKIT_WITH_CUDA
#include "ep/network_leg/credit_ring.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ep/network_leg/emulated_backend.h"
#include "support/thread_bootstrap.h"

namespace epkit::ep::network_leg {
namespace {

constexpr std::int64_t kLongNs = 10'000'000'000;  // far past any test's run time
constexpr std::uint64_t kSlotBytes = 64;

// Word j of message i from src to dst: every message differs, so a slot
// read a lap early or late, or a torn one, is caught.
std::uint32_t pattern(int src, int dst, std::uint64_t i, std::uint32_t j) {
  std::uint32_t x = static_cast<std::uint32_t>(src) * 0x9E3779B1u ^
                    static_cast<std::uint32_t>(dst) * 0x85EBCA77u ^
                    static_cast<std::uint32_t>(i) * 0xC2B2AE3Du ^ j;
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  return x ^ (x >> 12);
}

struct Shape {
  std::uint32_t slots;
  std::uint32_t credit_every;
};

// `world` ranks, each with one window: its send slots for every peer, then
// its receive slots from every peer; tails by sender, credits by receiver.
struct RingWorld {
  RingWorld(int n, Shape s, std::int64_t jitter_ns) : world(n), shape(s) {
    EmulatedNicOptions o;
    o.ring_slots = 256;
    o.num_signals = static_cast<std::uint32_t>(n) * shape.slots + static_cast<std::uint32_t>(n);
    o.timeout_s = 5;
    o.pacing.bytes_per_s = 10e9;
    o.pacing.latency_ns = 2000;
    o.pacing.reorder_jitter_ns = jitter_ns;
    for (int r = 0; r < n; ++r) {
      auto made = EmulatedBackend::create(o, std::make_unique<InProcessMapper>());
      EXPECT_TRUE(made.ok()) << made.error().message;
      nics.push_back(std::move(made).value());
      windows.emplace_back(2 * area(), 0);
      auto id = nics.back()->register_window(windows.back().data(), windows.back().size());
      EXPECT_TRUE(id.ok()) << id.error().message;
      window_ids.push_back(id.ok() ? id.value() : WindowId{});
    }
    test::GatherRoom room(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        test::ThreadBootstrap boot(room, r);
        auto ok = nics[static_cast<std::size_t>(r)]->exchange(boot);
        EXPECT_TRUE(ok.ok()) << ok.error().message;
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      progress.emplace_back([this, r] {
        while (!stop.load(std::memory_order_acquire)) {
          if (auto p = nics[static_cast<std::size_t>(r)]->progress(); !p.ok()) {
            failed.store(true);
            return;
          }
          std::this_thread::yield();
        }
      });
    }
  }
  ~RingWorld() {
    stop.store(true, std::memory_order_release);
    for (auto& t : progress) t.join();
  }

  std::uint64_t area() const {
    return static_cast<std::uint64_t>(world) * shape.slots * kSlotBytes;
  }
  // The ring from `src` to `dst` (both ends use the same description).
  CreditRing ring(int src, int dst) const {
    CreditRing r;
    r.slots = shape.slots;
    r.credit_every = shape.credit_every;
    r.slot_bytes = kSlotBytes;
    r.send_window = window_ids[static_cast<std::size_t>(src)];
    r.send_offset = static_cast<std::uint64_t>(dst) * shape.slots * kSlotBytes;
    r.recv_window = window_ids[static_cast<std::size_t>(dst)];
    r.recv_offset = area() + static_cast<std::uint64_t>(src) * shape.slots * kSlotBytes;
    r.tail = SignalId{static_cast<std::uint32_t>(src) * shape.slots};
    r.credit =
        SignalId{static_cast<std::uint32_t>(world) * shape.slots + static_cast<std::uint32_t>(dst)};
    return r;
  }
  DeviceLeg leg(int rank) const { return nics[static_cast<std::size_t>(rank)]->device_leg(); }
  std::uint8_t* window(int rank) { return windows[static_cast<std::size_t>(rank)].data(); }

  int world;
  Shape shape;
  std::vector<std::unique_ptr<EmulatedBackend>> nics;
  std::vector<std::vector<std::uint8_t>> windows;
  std::vector<WindowId> window_ids;
  std::vector<std::thread> progress;
  std::atomic<bool> stop{false};
  std::atomic<bool> failed{false};
};

struct Outcome {
  std::uint64_t sent = 0, consumed = 0, bad_words = 0, ahead = 0;
  bool sender_ok = true, receiver_ok = true;
};

// Every ordered pair trades `messages` messages; a receiver stalls for
// `stall_us` every 7 messages.
std::vector<Outcome> trade(RingWorld& w, std::uint64_t messages, int stall_us,
                           std::int64_t timeout_ns = kLongNs) {
  const int n = w.world;
  std::vector<Outcome> out(static_cast<std::size_t>(n * n));
  std::vector<std::atomic<std::uint64_t>> consumed(static_cast<std::size_t>(n * n));
  std::vector<std::thread> threads;
  for (int src = 0; src < n; ++src) {
    for (int dst = 0; dst < n; ++dst) {
      if (src == dst) continue;
      const auto pair = static_cast<std::size_t>(src * n + dst);
      threads.emplace_back([&, src, dst, pair] {  // sender
        const CreditRing r = w.ring(src, dst);
        const DeviceLeg leg = w.leg(src);
        Outcome& o = out[pair];
        for (std::uint64_t i = 0; i < messages; ++i) {
          if (!ring_wait_room(leg, r, i, timeout_ns)) {
            o.sender_ok = false;
            return;
          }
          // Back-pressure: never more than `slots` ahead of the consumer.
          o.ahead = std::max(o.ahead, i + 1 - consumed[pair].load(std::memory_order_acquire));
          auto* slot = reinterpret_cast<std::uint32_t*>(w.window(src) + ring_send_offset(r, i));
          for (std::uint32_t j = 0; j < kSlotBytes / 4; ++j) slot[j] = pattern(src, dst, i, j);
          if (ring_send(leg, r, dst, i, kSlotBytes, timeout_ns) != PostStatus::posted) {
            o.sender_ok = false;
            return;
          }
          o.sent = i + 1;
        }
      });
      threads.emplace_back([&, src, dst, pair] {  // receiver
        const CreditRing r = w.ring(src, dst);
        const DeviceLeg leg = w.leg(dst);
        Outcome& o = out[pair];
        std::uint64_t credited = 0;
        for (std::uint64_t i = 0; i < messages; ++i) {
          if (!ring_wait_landed(leg, r, i, timeout_ns)) {
            o.receiver_ok = false;
            return;
          }
          const auto* slot =
              reinterpret_cast<const std::uint32_t*>(w.window(dst) + ring_recv_offset(r, i));
          for (std::uint32_t j = 0; j < kSlotBytes / 4; ++j)
            o.bad_words += std::atomic_ref<const std::uint32_t>(slot[j]).load(
                               std::memory_order_acquire) != pattern(src, dst, i, j);
          if (stall_us > 0 && i % 7 == 3)
            std::this_thread::sleep_for(std::chrono::microseconds(stall_us));
          consumed[pair].store(i + 1, std::memory_order_release);
          if (ring_consumed(leg, r, src, i, i + 1 == messages, credited, timeout_ns) !=
              PostStatus::posted) {
            o.receiver_ok = false;
            return;
          }
          o.consumed = i + 1;
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  return out;
}

class CreditRingShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(CreditRingShapes, EveryMessageLandsBitwiseThroughAReorderingNic) {
  const Shape shape = GetParam();
  RingWorld w(3, shape, 20'000);  // puts land up to 20 us late, out of order
  constexpr std::uint64_t kMessages = 200;
  const auto out = trade(w, kMessages, /*stall_us=*/30);
  EXPECT_FALSE(w.failed.load());
  for (int src = 0; src < 3; ++src) {
    for (int dst = 0; dst < 3; ++dst) {
      if (src == dst) continue;
      const Outcome& o = out[static_cast<std::size_t>(src * 3 + dst)];
      const std::string pair = std::to_string(src) + " -> " + std::to_string(dst);
      EXPECT_TRUE(o.sender_ok && o.receiver_ok) << pair;
      EXPECT_EQ(o.sent, kMessages) << pair;
      EXPECT_EQ(o.consumed, kMessages) << pair;
      EXPECT_EQ(o.bad_words, 0u) << pair;
      EXPECT_LE(o.ahead, shape.slots) << pair;
    }
  }
  // Every credit comes back: each sender's credit count reaches its messages
  // (the last batch may still be on the wire when the receiver returns).
  for (int src = 0; src < 3; ++src) {
    for (int dst = 0; dst < 3; ++dst) {
      if (src == dst) continue;
      EXPECT_TRUE(
          ring_wait_room(w.leg(src), w.ring(src, dst), kMessages + shape.slots - 1, kLongNs))
          << src << " -> " << dst;
    }
  }
}

// One slot (every message waits for the last one's credit), two slots with a
// credit per message and per two, and wider rings with batched credits.
INSTANTIATE_TEST_SUITE_P(Slots, CreditRingShapes,
                         ::testing::Values(Shape{1, 1}, Shape{2, 1}, Shape{2, 2}, Shape{4, 3},
                                           Shape{8, 8}),
                         [](const ::testing::TestParamInfo<Shape>& shape) {
                           return "slots" + std::to_string(shape.param.slots) + "_credit" +
                                  std::to_string(shape.param.credit_every);
                         });

// Rows through a ring (RowStream), call after call: each call's rows go as
// chunks of 4 rows of 16 bytes, the last one short, and the ring's numbers go
// on from call to call, empty calls included.
TEST_P(CreditRingShapes, RowsCrossInChunksCallAfterCall) {
  const Shape shape = GetParam();
  RingWorld w(2, shape, 20'000);
  const std::vector<std::uint64_t> calls = {0, 1, 5, 13, 4, 0, 9, 64, 3};
  constexpr std::uint32_t kRows = 4;
  constexpr std::uint64_t kPitch = kSlotBytes / kRows;
  std::vector<std::uint64_t> bad(2, 0), read(2, 0);
  std::vector<bool> ok(4, true);
  std::vector<std::thread> threads;
  for (int src = 0; src < 2; ++src) {
    const int dst = 1 - src;
    threads.emplace_back([&, src, dst] {  // sender
      const DeviceLeg leg = w.leg(src);
      std::uint64_t base = 0;
      for (std::size_t c = 0; c < calls.size(); ++c) {
        const RowStream st{w.ring(src, dst), kRows, kPitch, base, calls[c]};
        ASSERT_TRUE(stream_valid(st));
        for (std::uint64_t j = 0; j < st.total; ++j) {
          if (!stream_wait_room(leg, st, j, kLongNs)) {
            ok[static_cast<std::size_t>(src)] = false;
            return;
          }
          auto* row = reinterpret_cast<std::uint32_t*>(w.window(src) + stream_send_offset(st, j));
          for (std::uint32_t k = 0; k < kPitch / 4; ++k)
            row[k] = pattern(src, dst, c * 1000 + j, k);
          if (stream_row_written(leg, st, dst, j, kLongNs) != PostStatus::posted) {
            ok[static_cast<std::size_t>(src)] = false;
            return;
          }
        }
        base += stream_chunks(st);
      }
    });
    threads.emplace_back([&, src, dst] {  // receiver
      const DeviceLeg leg = w.leg(dst);
      std::uint64_t base = 0, credited = 0;
      for (std::size_t c = 0; c < calls.size(); ++c) {
        const RowStream st{w.ring(src, dst), kRows, kPitch, base, calls[c]};
        for (std::uint64_t j = 0; j < st.total; ++j) {
          if (!stream_wait_row(leg, st, j, kLongNs)) {
            ok[static_cast<std::size_t>(2 + dst)] = false;
            return;
          }
          const auto* row =
              reinterpret_cast<const std::uint32_t*>(w.window(dst) + stream_recv_offset(st, j));
          for (std::uint32_t k = 0; k < kPitch / 4; ++k)
            bad[static_cast<std::size_t>(src)] +=
                std::atomic_ref<const std::uint32_t>(row[k]).load(std::memory_order_acquire) !=
                pattern(src, dst, c * 1000 + j, k);
          ++read[static_cast<std::size_t>(src)];
          if (stream_row_read(leg, st, src, j, credited, kLongNs) != PostStatus::posted) {
            ok[static_cast<std::size_t>(2 + dst)] = false;
            return;
          }
        }
        base += stream_chunks(st);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::uint64_t rows = 0;
  for (auto n : calls) rows += n;
  for (int src = 0; src < 2; ++src) {
    EXPECT_TRUE(ok[static_cast<std::size_t>(src)]) << "sender " << src;
    EXPECT_TRUE(ok[static_cast<std::size_t>(2 + src)]) << "receiver " << src;
    EXPECT_EQ(read[static_cast<std::size_t>(src)], rows) << "from " << src;
    EXPECT_EQ(bad[static_cast<std::size_t>(src)], 0u) << "from " << src;
  }
}

TEST(CreditRing, RowsWiderThanASlotAreNotAStream) {
  CreditRing r;
  r.slots = 2;
  r.slot_bytes = 64;
  EXPECT_TRUE(stream_valid(RowStream{r, 4, 16, 0, 10}));
  EXPECT_FALSE(stream_valid(RowStream{r, 4, 17, 0, 10}));
  EXPECT_FALSE(stream_valid(RowStream{r, 0, 16, 0, 10}));
  EXPECT_EQ(stream_chunks(RowStream{r, 4, 16, 0, 9}), 3u);
  EXPECT_EQ(stream_chunks(RowStream{r, 4, 16, 0, 0}), 0u);
}

TEST(CreditRing, ShapesThatCannotProgressAreInvalid) {
  CreditRing r;
  r.slots = 2;
  r.credit_every = 2;
  r.slot_bytes = 64;
  EXPECT_TRUE(ring_valid(r));
  r.credit_every = 3;  // the sender would wait for a batch the receiver never completes
  EXPECT_FALSE(ring_valid(r));
  r.credit_every = 0;
  EXPECT_FALSE(ring_valid(r));
  r.credit_every = 1;
  r.slots = 0;
  EXPECT_FALSE(ring_valid(r));
  r.slots = 2;
  r.slot_bytes = 0;
  EXPECT_FALSE(ring_valid(r));
}

TEST(CreditRing, AMessageLargerThanItsSlotIsRefused) {
  RingWorld w(2, Shape{2, 1}, 0);
  EXPECT_EQ(ring_send(w.leg(0), w.ring(0, 1), 1, 0, kSlotBytes + 1, kLongNs), PostStatus::refused);
  EXPECT_EQ(ring_send(w.leg(0), w.ring(0, 1), 1, 0, kSlotBytes, kLongNs), PostStatus::posted);
  EXPECT_TRUE(ring_wait_landed(w.leg(1), w.ring(0, 1), 0, kLongNs));
}

TEST(CreditRing, APeerTheNetworkLostEndsEveryWaitOnItInTime) {
  RingWorld w(2, Shape{2, 1}, 0);
  // From now on nothing from or to rank 1 lands (both NICs told).
  ASSERT_TRUE(w.nics[0]->drop_rank(1).ok());
  ASSERT_TRUE(w.nics[1]->drop_rank(1).ok());
  const auto start = std::chrono::steady_clock::now();
  const auto out = trade(w, 10, 0, /*timeout_ns=*/50'000'000);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // 0 -> 1: its first two messages fill the ring; the third waits for a
  // credit that never comes. 1 -> 0: nothing lands at rank 0.
  const Outcome& to_lost = out[1];
  const Outcome& from_lost = out[2];
  EXPECT_FALSE(to_lost.sender_ok);
  EXPECT_EQ(to_lost.sent, 2u);
  EXPECT_FALSE(to_lost.receiver_ok);
  EXPECT_FALSE(from_lost.receiver_ok);
  EXPECT_EQ(from_lost.consumed, 0u);
  EXPECT_LT(s, 2.0);
}

}  // namespace
}  // namespace epkit::ep::network_leg
#endif
