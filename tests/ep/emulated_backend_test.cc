// The emulated NIC's host backend (ep/network_leg/emulated_backend.h) on the
// CPU: 2 to 4 ranks as threads of this process, each with its own backend
// (its NIC), trading descriptors over an in-process Bootstrap and reaching
// each other's windows through InProcessMapper. Host producers post puts
// into each rank's ring; each rank's progress moves its own puts' bytes into
// peers' windows and then their signals.
#ifdef EPKIT_WITH_CUDA
#include "ep/network_leg/emulated_backend.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ep/core/hex.h"
#include "ep/network_leg/device_calls.h"
#include "support/thread_bootstrap.h"

namespace epkit::ep::network_leg {
namespace {

using test::GatherRoom;
using test::ThreadBootstrap;

// Ranks as threads: all_gather meets every rank of the world (bounded), and
// `tamper` may change what one rank sees of the others (a hostile peer).
struct World {
  static constexpr std::size_t kChunk = 256;
  int size = 0;
  std::vector<std::unique_ptr<ManualClock>> clocks;  // empty: the steady clock
  std::vector<std::unique_ptr<EmulatedBackend>> backends;
  // Each rank's one window: a receive area of kChunk per source rank, then
  // kChunk of its own bytes to send.
  std::vector<std::vector<std::uint8_t>> windows;

  static std::uint8_t pattern(int rank, std::size_t i) {
    return static_cast<std::uint8_t>(rank * 37 + i % 251 + 1);
  }
  std::uint64_t send_offset() const { return static_cast<std::size_t>(size) * kChunk; }

  World(int n, const EmulatedNicOptions& options, bool manual_clocks) : size(n) {
    for (int r = 0; r < n; ++r) {
      if (manual_clocks) clocks.push_back(std::make_unique<ManualClock>());
      auto made = EmulatedBackend::create(options, std::make_unique<InProcessMapper>(),
                                          manual_clocks ? clocks.back().get() : nullptr);
      EXPECT_TRUE(made.ok()) << made.error().message;
      backends.push_back(std::move(made).value());
      windows.emplace_back(send_offset() + kChunk, 0);
      for (std::size_t i = 0; i < kChunk; ++i) windows.back()[send_offset() + i] = pattern(r, i);
      auto id = backends.back()->register_window(windows.back().data(), windows.back().size());
      EXPECT_TRUE(id.ok()) << id.error().message;
    }
  }

  // Every rank's exchange on its own thread; each rank's outcome.
  std::vector<Result<void>> exchange(GatherRoom& room) {
    std::vector<Result<void>> out(static_cast<std::size_t>(size), Result<void>{});
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r] {
        ThreadBootstrap boot(room, r);
        out[static_cast<std::size_t>(r)] = backends[static_cast<std::size_t>(r)]->exchange(boot);
      });
    }
    for (auto& t : threads) t.join();
    return out;
  }
  void exchange_ok() {
    GatherRoom room(size);
    for (const auto& r : exchange(room)) ASSERT_TRUE(r.ok()) << r.error().message;
  }

  EmulatedBackend& at(int rank) { return *backends[static_cast<std::size_t>(rank)]; }
  std::uint64_t signal(int rank, std::uint32_t index) {
    return std::atomic_ref<std::uint64_t>(at(rank).device_leg().signals[index])
        .load(std::memory_order_acquire);
  }
  // Every rank's clock moves by `ns`, then every rank takes one step.
  void step_all(std::int64_t ns) {
    for (int r = 0; r < size; ++r) {
      if (!clocks.empty()) clocks[static_cast<std::size_t>(r)]->advance(ns);
      auto p = at(r).progress();
      ASSERT_TRUE(p.ok()) << "rank " << r << ": " << p.error().message;
    }
  }
};

// Rank `src`'s `part` of `parts` of its send area into its slot of `dst`'s
// receive area; the signal named after the source (one writer a signal).
PutRequest chunk_put(const World& w, int src, int dst, std::size_t part, std::size_t parts) {
  const std::size_t piece = World::kChunk / parts;
  PutRequest r;
  r.peer = dst;
  r.src_offset = w.send_offset() + part * piece;
  r.dst_offset = static_cast<std::size_t>(src) * World::kChunk + part * piece;
  r.bytes = piece;
  r.signal = SignalId{static_cast<std::uint32_t>(src)};
  r.signal_add = 1;
  return r;
}

EmulatedNicOptions small_options() {
  EmulatedNicOptions o;
  o.ring_slots = 16;
  o.num_signals = 8;
  o.timeout_s = 5;
  return o;
}

TEST(EmulatedBackend, OptionsOutOfRangeAreRefusedNamingTheField) {
  struct Case {
    std::function<void(EmulatedNicOptions&)> set;
    const char* field;
  };
  const std::vector<Case> cases = {
      {[](auto& o) { o.pacing.bytes_per_s = 0; }, "pacing.bytes_per_s"},
      {[](auto& o) { o.pacing.bytes_per_s = -5e9; }, "pacing.bytes_per_s"},
      {[](auto& o) { o.pacing.bytes_per_s = 4e14; }, "pacing.bytes_per_s"},  // 400 TB/s
      {[](auto& o) { o.pacing.bytes_per_s = std::nan(""); }, "pacing.bytes_per_s"},
      {[](auto& o) { o.pacing.latency_ns = -1; }, "pacing.latency_ns"},
      {[](auto& o) { o.pacing.latency_ns = 2'000'000'000; }, "pacing.latency_ns"},
      {[](auto& o) { o.pacing.reorder_jitter_ns = -3; }, "pacing.reorder_jitter_ns"},
      {[](auto& o) { o.pacing.burst_bytes = std::size_t{1} << 40; }, "pacing.burst_bytes"},
      {[](auto& o) { o.ring_slots = 0; }, "ring_slots"},
      {[](auto& o) { o.num_signals = 0; }, "num_signals"},
      {[](auto& o) { o.num_signals = 1u << 30; }, "num_signals"},
      {[](auto& o) { o.timeout_s = 0; }, "timeout_s"},
      {[](auto& o) { o.timeout_s = 1e9; }, "timeout_s"},
      {[](auto& o) { o.batch = 0; }, "batch"},
  };
  for (const auto& c : cases) {
    EmulatedNicOptions o;
    c.set(o);
    auto made = EmulatedBackend::create(o, std::make_unique<InProcessMapper>());
    ASSERT_FALSE(made.ok()) << c.field;
    EXPECT_EQ(made.error().code, ErrorCode::invalid);
    EXPECT_NE(made.error().message.find(c.field), std::string::npos) << made.error().message;
  }
  EXPECT_FALSE(EmulatedBackend::create(EmulatedNicOptions{}, nullptr).ok());
}

TEST(EmulatedBackend, DescribesItsNic) {
  auto made = EmulatedBackend::create(EmulatedNicOptions{}, std::make_unique<InProcessMapper>());
  ASSERT_TRUE(made.ok()) << made.error().message;
  EXPECT_EQ(made.value()->describe(), "emulated NIC, 50 GB/s, 2 us, in-process");
  EXPECT_EQ(made.value()->kind(), BackendKind::emulated_nic);
  EmulatedNicOptions o;
  o.pacing.bytes_per_s = 12.5e9;
  o.pacing.latency_ns = 500;
  o.pacing.reorder_jitter_ns = 3000;
  o.pacing.seed = 7;
  made = EmulatedBackend::create(o, std::make_unique<InProcessMapper>());
  ASSERT_TRUE(made.ok()) << made.error().message;
  EXPECT_EQ(made.value()->describe(),
            "emulated NIC, 12.5 GB/s, 0.5 us, reordered up to 3 us (seed 7), in-process");
}

TEST(EmulatedBackend, WindowsAreRegisteredOnceBeforeExchangeWithoutOverlap) {
  World w(2, small_options(), true);
  std::vector<std::uint8_t> more(64);
  auto& b = w.at(0);
  EXPECT_FALSE(b.register_window(nullptr, 64).ok());
  EXPECT_FALSE(b.register_window(more.data(), 0).ok());
  auto overlap = b.register_window(w.windows[0].data() + 8, 16);
  ASSERT_FALSE(overlap.ok());
  EXPECT_NE(overlap.error().message.find("overlaps window 0"), std::string::npos)
      << overlap.error().message;
  auto second = b.register_window(more.data(), more.size());
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_EQ(second.value(), WindowId{1});
  EXPECT_FALSE(b.progress().ok());  // nothing to drive before exchange
  EXPECT_FALSE(b.drop_rank(1).ok());
  EXPECT_FALSE(b.take_idle().ok());  // no NIC modelled yet

  w.exchange_ok();
  EXPECT_TRUE(b.take_idle().ok());
  std::vector<std::uint8_t> late(64);
  auto after = b.register_window(late.data(), late.size());
  ASSERT_FALSE(after.ok());
  EXPECT_NE(after.error().message.find("after exchange"), std::string::npos)
      << after.error().message;
  GatherRoom again(2);
  ThreadBootstrap boot(again, 0);
  EXPECT_FALSE(b.exchange(boot).ok());  // once only

  const DeviceLeg leg = b.device_leg();
  EXPECT_EQ(leg.kind, BackendKind::emulated_nic);
  EXPECT_EQ(leg.rank, 0);
  EXPECT_EQ(leg.world_size, 2);
  EXPECT_NE(leg.signals, nullptr);
  EXPECT_EQ(leg.num_signals, 8u);
  EXPECT_EQ(leg.queue_slots, 16u);
  EXPECT_NE(leg.requests, nullptr);
  EXPECT_NE(leg.queue_tail, nullptr);
}

// Every rank on its own thread: it posts 4 puts to every rank (itself
// included), runs its NIC, and checks that every source's bytes and signal
// reached it. The real clock, reordering on.
void all_to_all_on_threads(int ranks) {
  constexpr std::size_t kParts = 4;
  EmulatedNicOptions o = small_options();
  o.pacing.reorder_jitter_ns = 20'000;
  World w(ranks, o, false);
  w.exchange_ok();
  GatherRoom done_room(ranks);
  std::vector<std::string> failures(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      auto& b = w.at(r);
      std::string& failure = failures[static_cast<std::size_t>(r)];
      for (std::size_t part = 0; part < kParts; ++part) {
        for (int p = 0; p < ranks; ++p) {
          // The ring holds 16: a full ring waits for this rank's own
          // progress, so post and progress take turns.
          if (b.post(chunk_put(w, r, p, part, kParts)) != PostStatus::posted) {
            failure = "post failed";
            return;
          }
          if (auto s = b.progress(); !s.ok()) failure = s.error().message;
        }
      }
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      auto complete = [&] {
        for (int s = 0; s < ranks; ++s) {
          if (w.signal(r, static_cast<std::uint32_t>(s)) < kParts) return false;
        }
        return b.in_flight() == 0;
      };
      while (!complete() && std::chrono::steady_clock::now() < deadline) {
        if (auto s = b.progress(); !s.ok()) failure = s.error().message;
      }
      if (!complete()) failure = fmt::format("rank {}: not every put landed in 10 s", r);
      if (b.fault()) failure = b.fault()->reason;
      for (int s = 0; s < ranks && failure.empty(); ++s) {
        for (std::size_t i = 0; i < World::kChunk; ++i) {
          const auto got = w.windows[static_cast<std::size_t>(r)][s * World::kChunk + i];
          if (got != World::pattern(s, i)) {
            failure = fmt::format("rank {}: byte {} from rank {} is {}", r, i, s, got);
            break;
          }
        }
      }
      // Nobody frees a window a peer may still write.
      ThreadBootstrap boot(done_room, r);
      (void)boot.all_gather("done");
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) {
    EXPECT_EQ(failures[static_cast<std::size_t>(r)], "") << "rank " << r;
  }
}

TEST(EmulatedBackend, TwoRanksOnThreadsDeliverEveryPut) {
  all_to_all_on_threads(2);
}
TEST(EmulatedBackend, ThreeRanksOnThreadsDeliverEveryPut) {
  all_to_all_on_threads(3);
}
TEST(EmulatedBackend, FourRanksOnThreadsDeliverEveryPut) {
  all_to_all_on_threads(4);
}

TEST(EmulatedBackend, BandwidthCapIsHonouredOnTheInjectedClock) {
  EmulatedNicOptions o = small_options();
  o.pacing.bytes_per_s = 1e9;  // 1 byte a ns
  o.pacing.burst_bytes = 64;
  o.pacing.latency_ns = 1000;
  World w(2, o, true);
  w.exchange_ok();
  // 8 puts of 64 bytes from rank 0 to rank 1: the first leaves at once (the
  // burst), each next one 64 ns later.
  for (std::size_t part = 0; part < 8; ++part) {
    const std::size_t piece = World::kChunk / 4;
    PutRequest r = chunk_put(w, 0, 1, part % 4, 4);
    r.bytes = piece;
    ASSERT_EQ(w.at(0).post(r), PostStatus::posted);
  }
  std::vector<std::pair<std::int64_t, std::uint64_t>> seen;  // (time, landed)
  for (std::int64_t t = 0; t <= 3000; t += 8) {
    auto p = w.at(0).progress();
    ASSERT_TRUE(p.ok()) << p.error().message;
    seen.emplace_back(t, w.signal(1, 0));
    w.clocks[0]->advance(8);
  }
  for (const auto& [t, landed] : seen) {
    // The k-th put leaves at 64k ns (the burst lets the first go at once)
    // and lands 1 us later.
    const std::int64_t left = t - o.pacing.latency_ns;
    const std::uint64_t most = left < 0 ? 0 : 1 + static_cast<std::uint64_t>(left / 64);
    EXPECT_EQ(landed, std::min<std::uint64_t>(8, most)) << "at " << t << " ns";
  }
  EXPECT_EQ(w.signal(1, 0), 8u);
  EXPECT_EQ(w.at(0).in_flight(), 0u);
}

TEST(EmulatedBackend, StallDelaysTheStalledNic) {
  World w(2, small_options(), true);
  w.exchange_ok();
  ASSERT_TRUE(w.at(0).stall(0, 1'000'000).ok());
  ASSERT_EQ(w.at(0).post(chunk_put(w, 0, 1, 0, 1)), PostStatus::posted);
  w.step_all(0);
  w.step_all(900'000);
  EXPECT_EQ(w.signal(1, 0), 0u);
  w.step_all(200'000);
  EXPECT_EQ(w.signal(1, 0), 1u);
  EXPECT_FALSE(w.at(0).stall(5, 10).ok());
}

TEST(EmulatedBackend, FlushWaitsUntilTheNicHasReadTheSource) {
  // A "kernel" (this thread) posts through the DeviceLeg the backend hands
  // out, as the device calls do; flush holds until the put has landed.
  World w(2, small_options(), true);
  w.exchange_ok();
  const DeviceLeg leg = w.at(0).device_leg();
  ASSERT_NE(leg.queue_done, nullptr);
  const PutRequest r = chunk_put(w, 0, 1, 0, 1);
  FlushMark mark;
  ASSERT_EQ(leg_put(leg, r.peer, r.dst_window, r.dst_offset, r.src_window, r.src_offset, r.bytes,
                    r.signal, r.signal_add, 1'000'000'000, &mark),
            PostStatus::posted);
  EXPECT_EQ(leg_flush(leg, mark, 1'000'000), PostStatus::timed_out);  // not yet read
  w.step_all(0);
  w.step_all(1'000'000);
  EXPECT_EQ(w.signal(1, 0), 1u);
  EXPECT_EQ(leg_flush(leg, mark, 1'000'000), PostStatus::posted);
}

// Producer-moved puts (what a GPU uses): the backend hands the kernels every
// rank's windows and signal arrays, and grants a put once the NIC model
// says it crossed, without moving a byte itself; a put to a dropped rank is
// never granted.
TEST(EmulatedBackend, ProducerMovedPutsAreGrantedNotCopied) {
  EmulatedNicOptions o = small_options();
  o.producer_moves = true;
  World w(3, o, true);
  w.exchange_ok();
  const DeviceLeg leg = w.at(0).device_leg();
  ASSERT_NE(leg.grants, nullptr);
  ASSERT_NE(leg.peer_windows, nullptr);
  ASSERT_NE(leg.peer_signals, nullptr);
  ASSERT_EQ(leg.windows_per_peer, 1u);
  for (int r = 0; r < 3; ++r) {
    const PeerWindow& window = leg.peer_windows[r];
    EXPECT_EQ(window.base, w.windows[static_cast<std::size_t>(r)].data()) << "rank " << r;
    EXPECT_EQ(window.bytes, w.windows[static_cast<std::size_t>(r)].size());
    EXPECT_EQ(leg.peer_signals[r], w.at(r).device_leg().signals) << "rank " << r;
  }
  const auto before = w.windows[1];
  ASSERT_EQ(w.at(0).post(chunk_put(w, 0, 1, 0, 1)), PostStatus::posted);  // ticket 0
  ASSERT_EQ(w.at(0).post(chunk_put(w, 0, 2, 0, 1)), PostStatus::posted);  // ticket 1
  w.step_all(0);
  EXPECT_EQ(leg.grants[0], 0u);  // still crossing the NIC
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(w.at(r).drop_rank(2).ok());
  w.step_all(1'000'000);
  EXPECT_EQ(std::atomic_ref<std::uint64_t>(leg.grants[0]).load(), 1u);  // ticket 0 granted
  EXPECT_EQ(leg.grants[1], 0u);                                         // to the dropped rank
  EXPECT_EQ(w.windows[1], before);  // the producer moves the bytes, not the host
  EXPECT_EQ(w.signal(1, 0), 0u);    // nor the signal
  ASSERT_TRUE(w.at(0).fault().has_value());
  EXPECT_EQ(w.at(0).fault()->rank, 2);
}

TEST(EmulatedBackend, DroppedPeerIsNamedByEverySurvivor) {
  World w(4, small_options(), true);
  w.exchange_ok();
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(w.at(r).drop_rank(2).ok());
  for (int r = 0; r < 4; ++r) {
    for (int p = 0; p < 4; ++p) {
      if (p == r) continue;
      ASSERT_EQ(w.at(r).post(chunk_put(w, r, p, 0, 1)), PostStatus::posted);
    }
  }
  for (int i = 0; i < 5; ++i) w.step_all(1'000'000);
  for (int r = 0; r < 4; ++r) {
    const auto f = w.at(r).fault();
    ASSERT_TRUE(f.has_value()) << "rank " << r;
    EXPECT_EQ(f->rank, 2) << "rank " << r << ": " << f->reason;
    EXPECT_NE(f->reason.find("rank 2 dropped"), std::string::npos) << f->reason;
  }
  // Between survivors the puts still land; nothing from or to rank 2 does.
  EXPECT_EQ(w.signal(0, 1), 1u);
  EXPECT_EQ(w.signal(3, 0), 1u);
  EXPECT_EQ(w.signal(0, 2), 0u);
  EXPECT_EQ(w.signal(2, 0), 0u);
}

TEST(EmulatedBackend, PutOutsideAWindowIsAFaultOfItsSender) {
  World w(2, small_options(), true);
  w.exchange_ok();
  PutRequest past = chunk_put(w, 1, 0, 0, 1);
  past.dst_offset = w.windows[0].size() - 8;  // 256 bytes from 8 before the end
  ASSERT_EQ(w.at(1).post(past), PostStatus::posted);
  PutRequest bad_signal = chunk_put(w, 1, 0, 0, 1);
  bad_signal.signal = SignalId{8};  // of 8
  ASSERT_EQ(w.at(1).post(bad_signal), PostStatus::posted);
  w.step_all(1'000'000);
  w.step_all(1'000'000);
  const auto f = w.at(1).fault();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->rank, 1);
  EXPECT_NE(f->reason.find("writes 256 bytes at"), std::string::npos) << f->reason;
  EXPECT_EQ(w.at(1).in_flight(), 0u);                                    // neither was paced
  EXPECT_EQ(w.windows[0].back(), World::pattern(0, World::kChunk - 1));  // not overwritten
  EXPECT_EQ(w.signal(0, 1), 0u);
}

TEST(EmulatedBackend, ProducerThatStopsMidPostIsAFaultOfItsRank) {
  EmulatedNicOptions o = small_options();
  o.timeout_s = 0.001;
  World w(2, o, true);
  w.exchange_ok();
  const auto claim = claim_slot(ring_of(w.at(0).device_leg()), 0);
  ASSERT_EQ(claim.status, PostStatus::posted);  // and never published
  w.step_all(500'000);
  EXPECT_FALSE(w.at(0).fault().has_value());
  w.step_all(600'000);
  const auto f = w.at(0).fault();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->rank, 0);
  EXPECT_NE(f->reason.find("claimed and not published"), std::string::npos) << f->reason;
  EXPECT_FALSE(w.at(1).fault().has_value());
}

TEST(EmulatedBackend, AbortEndsPendingPuts) {
  World w(2, small_options(), true);
  w.exchange_ok();
  ASSERT_EQ(w.at(0).post(chunk_put(w, 0, 1, 0, 1)), PostStatus::posted);
  ASSERT_TRUE(w.at(0).progress().ok());
  w.at(0).abort();
  w.clocks[0]->advance(1'000'000);
  EXPECT_FALSE(w.at(0).progress().ok());
  EXPECT_EQ(w.signal(1, 0), 0u);
  EXPECT_EQ(w.windows[1][0], 0u);
}

// Each case changes what both ranks see of the other's descriptor; both
// refuse it naming the other rank.
TEST(EmulatedBackend, BadDescriptorsFromAPeerAreRefusedNamingIt) {
  auto field = [](std::size_t at, int width, std::uint64_t value) {
    return [=](std::string& raw) {
      for (int i = 0; i < width; ++i) {
        raw[at + static_cast<std::size_t>(i)] = static_cast<char>((value >> (8 * i)) & 0xff);
      }
    };
  };
  struct Case {
    const char* name;
    std::function<void(std::string& raw)> bytes;  // on the decoded bytes
    std::function<void(std::string& hex)> text;   // or on the text
    const char* says;
  };
  const std::vector<Case> cases = {
      {"truncated", [](std::string& raw) { raw.pop_back(); }, {}, "bytes;"},
      {"trailing byte", [](std::string& raw) { raw.push_back('\0'); }, {}, "bytes;"},
      {"empty", {}, [](std::string& hex) { hex.clear(); }, "hex characters"},
      {"odd length", {}, [](std::string& hex) { hex.pop_back(); }, "hex characters"},
      {"not hex", {}, [](std::string& hex) { hex.replace(0, 2, "zz"); }, "not hex"},
      {"huge", {}, [](std::string& hex) { hex.append(1 << 16, '0'); }, "hex characters"},
      {"magic", field(0, 4, 0x12345678), {}, "magic"},
      {"version", field(4, 2, 3), {}, "version 3"},
      {"handle size", field(6, 2, 9), {}, "9-byte handles"},
      {"rank", field(8, 4, 5), {}, "it says rank 5"},
      {"world", field(12, 4, 3), {}, "of 3"},
      {"kind", field(16, 4, 1), {}, "backend kind 1"},
      {"no signals", field(20, 4, 0), {}, "0 signals"},
      {"too many signals", field(20, 4, 0xffffffff), {}, "4294967295 signals"},
      {"too many windows", field(24, 4, 65), {}, "65 windows"},
      {"more windows than sent", field(24, 4, 2), {}, "2 windows of 8-byte handles"},
      {"pid", field(28, 4, 0x7fffffff), {}, "pid 2147483647"},
      {"empty window", field(40 + 8, 8, 0), {}, "window 0 of 0 bytes"},
      {"null signals", field(40, 8, 0), {}, "null address"},
  };
  for (const auto& c : cases) {
    World w(2, small_options(), true);
    GatherRoom room(2);
    room.tamper = [&](int viewer, std::vector<std::string>& seen) {
      if (seen[0] == "mapped") return;
      auto& theirs = seen[static_cast<std::size_t>(1 - viewer)];
      if (c.bytes) {
        std::string raw(theirs.size() / 2, '\0');
        ASSERT_TRUE(from_hex(theirs, raw.data(), raw.size()));
        c.bytes(raw);
        theirs = to_hex(raw.data(), raw.size());
      } else {
        c.text(theirs);
      }
    };
    const auto results = w.exchange(room);
    for (int r = 0; r < 2; ++r) {
      const auto& got = results[static_cast<std::size_t>(r)];
      ASSERT_FALSE(got.ok()) << c.name << ", rank " << r;
      const auto& message = got.error().message;
      EXPECT_NE(message.find(fmt::format("rank {}", 1 - r)), std::string::npos)
          << c.name << ": " << message;
      EXPECT_NE(message.find(c.says), std::string::npos) << c.name << ": " << message;
    }
  }
}

// A peer's process that exits is seen by the NIC's watch: the kernels' word
// (DeviceLeg::exited) and exited_rank() hold its rank, a wait on it ends at
// once, and a wait on a live peer runs its course (at a job's end ranks leave
// at their own pace), its caller then naming the exited rank. Not a fault:
// the leg itself stays healthy.
/// A child process standing for rank 1's, and a world of three in-process
/// ranks whose rank 0 was told rank 1 is that process (its descriptor's
/// pid), exchanged.
struct WatchedPeer {
  pid_t peer = -1;
  std::unique_ptr<World> world;
};
void watch_a_child(WatchedPeer& out) {
  out.peer = ::fork();
  if (out.peer == 0) {
    ::pause();
    ::_exit(0);
  }
  ASSERT_GT(out.peer, 0);
  out.world = std::make_unique<World>(3, small_options(), false);
  GatherRoom room(3);
  const pid_t peer = out.peer;
  room.tamper = [peer](int viewer, std::vector<std::string>& seen) {
    if (viewer != 0 || seen[0] == "mapped") return;
    std::string raw(seen[1].size() / 2, '\0');
    ASSERT_TRUE(from_hex(seen[1], raw.data(), raw.size()));
    for (int i = 0; i < 4; ++i)
      raw[28 + static_cast<std::size_t>(i)] =
          static_cast<char>((static_cast<std::uint32_t>(peer) >> (8 * i)) & 0xff);
    seen[1] = to_hex(raw.data(), raw.size());
  };
  for (const auto& r : out.world->exchange(room)) ASSERT_TRUE(r.ok()) << r.error().message;
}

TEST(EmulatedBackend, APeerWhoseProcessExitsIsSeenAndEndsWaitsOnIt) {
  if (ProcessWatch::self().pid_namespace == 0) GTEST_SKIP() << "no /proc/self/ns/pid here";
  WatchedPeer watched;
  ASSERT_NO_FATAL_FAILURE(watch_a_child(watched));
  const pid_t peer = watched.peer;
  auto& nic = *watched.world->backends[0];
  const DeviceLeg leg = nic.device_leg();
  ASSERT_NE(leg.exited, nullptr);
  ASSERT_TRUE(nic.progress().ok());
  EXPECT_FALSE(nic.exited_rank());
  EXPECT_EQ(*leg.exited, 0u);
  ::kill(peer, SIGKILL);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!nic.exited_rank() && std::chrono::steady_clock::now() < end) {
    ASSERT_TRUE(nic.progress().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::waitpid(peer, nullptr, 0);
  EXPECT_EQ(nic.exited_rank(), 1);
  EXPECT_FALSE(nic.fault());
  EXPECT_EQ(*leg.exited, 2u);
  EXPECT_EQ(leg_exited(leg), 1);
  const auto timed = [&](int owed_by, std::int64_t bound_ns) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool met = leg_wait(leg, SignalId{0}, 1, bound_ns, owed_by);
    return std::make_pair(
        met, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  const auto [on_dead, dead_s] = timed(1, 5'000'000'000);  // at once, not after 5 s
  EXPECT_FALSE(on_dead);
  EXPECT_LT(dead_s, 1.0);
  const auto [on_live, live_s] = timed(2, 50'000'000);  // its whole 50 ms
  EXPECT_FALSE(on_live);
  EXPECT_GE(live_s, 0.045);
}

// An error path asks now (the Buffer naming why its kernels failed): the
// exit is seen without the progress loop having run since, and the kernels'
// word is set for the waits to come.
TEST(EmulatedBackend, APeerExitIsSeenWhenAskedNow) {
  if (ProcessWatch::self().pid_namespace == 0) GTEST_SKIP() << "no /proc/self/ns/pid here";
  WatchedPeer watched;
  ASSERT_NO_FATAL_FAILURE(watch_a_child(watched));
  auto& nic = *watched.world->backends[0];
  const DeviceLeg leg = nic.device_leg();
  EXPECT_FALSE(nic.exited_rank_now());
  ::kill(watched.peer, SIGKILL);
  ::waitpid(watched.peer, nullptr, 0);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::optional<int> seen;
  while (!(seen = nic.exited_rank_now()) && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(seen, 1);
  EXPECT_EQ(*leg.exited, 2u);
  EXPECT_EQ(nic.exited_rank(), 1);
  EXPECT_FALSE(nic.fault());
}

TEST(EmulatedBackend, DescriptorRoundTrips) {
  RankDescriptor d;
  d.rank = 3;
  d.world = 4;
  d.num_signals = 100;
  d.process = {4242, 0x1234567890ull};
  d.signals_handle = std::string(8, 'a');
  d.windows = {{4096, std::string(8, 'b')}, {1, std::string(8, 'c')}};
  auto back = RankDescriptor::decode(d.encode(), 3, 4, 8);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value().num_signals, 100u);
  EXPECT_EQ(back.value().process.pid, 4242u);
  EXPECT_EQ(back.value().process.pid_namespace, 0x1234567890ull);
  EXPECT_EQ(back.value().signals_handle, d.signals_handle);
  ASSERT_EQ(back.value().windows.size(), 2u);
  EXPECT_EQ(back.value().windows[0].bytes, 4096u);
  EXPECT_EQ(back.value().windows[1].handle, std::string(8, 'c'));
  EXPECT_FALSE(RankDescriptor::decode(d.encode(), 2, 4, 8).ok());
  EXPECT_FALSE(RankDescriptor::decode(d.encode(), 3, 4, 72).ok());
}

}  // namespace
}  // namespace epkit::ep::network_leg
#endif
