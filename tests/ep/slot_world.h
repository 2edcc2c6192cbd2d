// Ranks of the NCCL proxy backend's host loop in one thread, for the CPU
// tests of ep/network_leg/slot_proxy.h and slot_rounds.h: each rank a window
// and signals in host memory, a request ring its "kernel" posts to, and a
// SlotProxy over whatever transport the test connects.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "ep/network_leg/request_queue.h"
#include "ep/network_leg/slot_proxy.h"
#include "ep/put_request.h"

namespace epkit::ep::network_leg::testing {

inline constexpr std::int64_t kSlotLongNs = 10'000'000'000;
inline constexpr std::uint64_t kSlotWindow = 4096;
inline constexpr std::uint32_t kSlotSignals = 8;

struct SlotRank {
  std::vector<std::byte> window = std::vector<std::byte>(kSlotWindow);
  std::vector<std::uint64_t> signals = std::vector<std::uint64_t>(kSlotSignals, 0);
  std::vector<std::byte> staging;
  RequestQueueStorage queue{16};
  std::unique_ptr<SlotTransport> transport;
  std::unique_ptr<SlotProxy> proxy;
};

/// Slot memory as host memory: memcpy, the signal written into the rank's array.
inline SlotMemory host_slot_memory(std::vector<std::uint64_t>* signals) {
  SlotMemory m;
  m.copy = [](std::byte* dst, const std::byte* src, std::size_t n) -> Result<void> {
    std::memmove(dst, src, n);
    return {};
  };
  m.write_header = [](std::byte* slot, const SlotHeader& h) -> Result<void> {
    std::memcpy(slot, &h, sizeof(h));
    return {};
  };
  m.read_header = [](const std::byte* slot) -> Result<SlotHeader> {
    SlotHeader h;
    std::memcpy(&h, slot, sizeof(h));
    return h;
  };
  m.write_signal = [signals](SignalId s, std::uint64_t v) -> Result<void> {
    if (signals == nullptr) return make_error(ErrorCode::internal, "no signals here");
    signals->at(s.value) = v;
    return {};
  };
  return m;
}

struct SlotWorld {
  using TransportFactory = std::function<std::unique_ptr<SlotTransport>(int rank, SlotRank& state)>;
  SlotProxyOptions options;
  std::vector<std::unique_ptr<SlotRank>> ranks;

  SlotWorld(int n, std::uint32_t send_slots, std::uint32_t receives,
            std::uint32_t slot_bytes = 256) {
    options.geometry = *SlotGeometry::make(slot_bytes);
    options.send_slots = send_slots;
    options.receives_per_peer = receives;
    for (int r = 0; r < n; ++r) {
      auto rank = std::make_unique<SlotRank>();
      for (std::size_t i = 0; i < kSlotWindow; ++i)
        rank->window[i] = static_cast<std::byte>((static_cast<std::size_t>(r) * 31 + i * 7) & 0xff);
      rank->staging.resize(SlotProxy::staging_bytes(n, options));
      ranks.push_back(std::move(rank));
    }
  }

  /// Makes every rank's transport and proxy and starts them.
  void connect(const TransportFactory& factory) {
    const int n = static_cast<int>(ranks.size());
    for (int r = 0; r < n; ++r) {
      SlotRank& rank = *ranks[static_cast<std::size_t>(r)];
      rank.transport = factory(r, rank);
      rank.proxy = std::make_unique<SlotProxy>(
          r, n, options, rank.queue.ring(),
          std::vector<LocalWindow>{{rank.window.data(), kSlotWindow}}, kSlotSignals, rank.staging,
          *rank.transport, host_slot_memory(&rank.signals));
    }
    for (auto& rank : ranks) EXPECT_TRUE(rank->proxy->start().ok());
  }

  // A kernel of rank `from` posts a put of `bytes` from its window at
  // `src` into `to`'s window at `dst`, adding `add` to signal `signal`.
  void put(int from, int to, std::uint64_t src, std::uint64_t dst, std::uint64_t bytes,
           std::uint32_t signal, std::uint64_t add) {
    const PutRequest r = make_put(to, dst, src, bytes, signal, add);
    ASSERT_EQ(post_request(ranks[static_cast<std::size_t>(from)]->queue.ring(), r, kSlotLongNs),
              PostStatus::posted);
  }

  // Rank 0 puts 1 byte, a whole slot's payload (192 bytes at 256-byte
  // slots), 1500 bytes (several slots) and a bare signal to rank 1; returns
  // rank 0's window as it was, for expect_every_size() after the run.
  std::vector<std::byte> post_every_size() {
    put(0, 1, 0, 100, 1, 0, 1);
    put(0, 1, 10, 200, 192, 0, 1);
    put(0, 1, 500, 1000, 1500, 1, 1500);
    put(0, 1, 0, 0, 0, 2, 7);
    return ranks[0]->window;
  }
  void expect_every_size(const std::vector<std::byte>& before) {
    const auto& dst = ranks[1]->window;
    EXPECT_EQ(dst[100], before[0]);
    EXPECT_EQ(std::memcmp(dst.data() + 200, before.data() + 10, 192), 0);
    EXPECT_EQ(std::memcmp(dst.data() + 1000, before.data() + 500, 1500), 0);
    EXPECT_EQ(ranks[1]->signals[0], 2u);
    EXPECT_EQ(ranks[1]->signals[1], 1500u);
    EXPECT_EQ(ranks[1]->signals[2], 7u);
    for (auto& r : ranks) EXPECT_FALSE(r->proxy->fault()) << r->proxy->fault()->reason;
  }

  // Every rank puts 600 bytes of its window (from 3000) into every other's
  // at 700 x its rank (below 2700: sources and destinations never overlap),
  // adding 600 to the signal of its rank; steps `rounds` times; checks.
  void all_to_all(int rounds) {
    const int n = static_cast<int>(ranks.size());
    std::vector<std::vector<std::byte>> before;
    for (auto& r : ranks) before.push_back(r->window);
    for (int from = 0; from < n; ++from) {
      for (int to = 0; to < n; ++to) {
        if (from != to)
          put(from, to, 3000, static_cast<std::uint64_t>(from) * 700, 600,
              static_cast<std::uint32_t>(from), 600);
      }
    }
    run(rounds);
    for (int to = 0; to < n; ++to) {
      SlotRank& dst = *ranks[static_cast<std::size_t>(to)];
      for (int from = 0; from < n; ++from) {
        if (from == to) continue;
        EXPECT_EQ(std::memcmp(dst.window.data() + from * 700,
                              before[static_cast<std::size_t>(from)].data() + 3000, 600),
                  0)
            << from << " -> " << to;
        EXPECT_EQ(dst.signals[static_cast<std::size_t>(from)], 600u) << from << " -> " << to;
      }
      EXPECT_FALSE(dst.proxy->fault()) << dst.proxy->fault()->reason;
    }
  }

  // Steps every proxy `rounds` times.
  void run(int rounds = 200) {
    for (int i = 0; i < rounds; ++i) {
      for (auto& rank : ranks) (void)rank->proxy->step();
    }
  }
};

}  // namespace epkit::ep::network_leg::testing
