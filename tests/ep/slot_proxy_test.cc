// The NCCL proxy backend's host loop (ep/network_leg/slot_proxy.h) on the
// CPU: ranks are proxies in one thread over an in-memory transport with
// NCCL's ordering (per peer and stream, sends meet receives in posting
// order); puts of every size land whole with their signal after their
// bytes, small staging still drains (back-pressure), and a bad request, a
// stranger's slot or a dead peer become a fault naming the rank.
#ifdef EPKIT_WITH_CUDA
#include "ep/network_leg/slot_proxy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "ep/network_leg/request_queue.h"
#include "ep/put_request.h"

namespace epkit::ep::network_leg {
namespace {

constexpr std::int64_t kLongNs = 10'000'000'000;
constexpr std::uint64_t kWindow = 4096;
constexpr std::uint32_t kSignals = 8;

// Every rank's posted sends and receives; deliver() matches them in order
// per (source, destination, stream) and copies the bytes.
class Network {
 public:
  struct Op {
    const std::byte* src = nullptr;
    std::byte* dst = nullptr;
    std::size_t bytes = 0;
    std::uint64_t tag = 0;
  };
  using Key = std::tuple<int, int, SlotStream>;  // source, destination, stream
  std::map<Key, std::deque<Op>> sends, receives;
  std::map<int, std::vector<SlotCompletion>> done;  // by rank
  std::set<int> dead;
  // A stranger's slot waiting to be delivered to (destination, stream) as if from source.
  std::map<Key, std::vector<std::byte>> injected;

  void deliver() {
    for (auto& [key, queue] : receives) {
      auto& [src, dst, stream] = key;
      if (auto inj = injected.find(key); inj != injected.end() && !queue.empty()) {
        Op r = queue.front();
        queue.pop_front();
        std::memcpy(r.dst, inj->second.data(), std::min(r.bytes, inj->second.size()));
        done[dst].push_back({r.tag, false});
        injected.erase(inj);
        continue;
      }
      auto& out = sends[key];
      while (!queue.empty() && !out.empty()) {
        Op r = queue.front(), s = out.front();
        queue.pop_front();
        out.pop_front();
        ASSERT_LE(s.bytes, r.bytes) << "a send larger than its receive";
        std::memcpy(r.dst, s.src, s.bytes);
        done[dst].push_back({r.tag, false});
        done[src].push_back({s.tag, false});
      }
    }
  }
};

class Transport : public SlotTransport {
 public:
  Transport(Network& net, int rank) : m_net(&net), m_rank(rank) {}
  Result<void> post_send(int peer, SlotStream stream, const std::byte* slot, std::size_t bytes,
                         std::uint64_t tag) override {
    if (m_net->dead.count(peer) != 0) {
      m_net->done[m_rank].push_back({tag, true});
      return {};
    }
    m_net->sends[{m_rank, peer, stream}].push_back({slot, nullptr, bytes, tag});
    return {};
  }
  Result<void> post_recv(int peer, SlotStream stream, std::byte* slot, std::size_t bytes,
                         std::uint64_t tag) override {
    m_net->receives[{peer, m_rank, stream}].push_back({nullptr, slot, bytes, tag});
    return {};
  }
  Result<std::vector<SlotCompletion>> poll() override {
    m_net->deliver();
    // A dead peer's posted receives never finish: they fail.
    for (auto& [key, queue] : m_net->receives) {
      if (std::get<1>(key) == m_rank && m_net->dead.count(std::get<0>(key)) != 0) {
        for (const auto& op : queue) m_net->done[m_rank].push_back({op.tag, true});
        queue.clear();
      }
    }
    return std::exchange(m_net->done[m_rank], {});
  }

 private:
  Network* m_net;
  int m_rank;
};

struct Rank {
  std::vector<std::byte> window = std::vector<std::byte>(kWindow);
  std::vector<std::uint64_t> signals = std::vector<std::uint64_t>(kSignals, 0);
  std::vector<std::byte> staging;
  RequestQueueStorage queue{16};
  std::unique_ptr<Transport> transport;
  std::unique_ptr<SlotProxy> proxy;
};

SlotMemory host_memory(Rank& rank) {
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
  m.write_signal = [&rank](SignalId s, std::uint64_t v) -> Result<void> {
    rank.signals.at(s.value) = v;
    return {};
  };
  return m;
}

struct World {
  Network net;
  std::vector<std::unique_ptr<Rank>> ranks;

  World(int n, std::uint32_t send_slots, std::uint32_t receives, std::uint32_t slot_bytes = 256) {
    SlotProxyOptions options;
    options.geometry = *SlotGeometry::make(slot_bytes);
    options.send_slots = send_slots;
    options.receives_per_peer = receives;
    for (int r = 0; r < n; ++r) {
      auto rank = std::make_unique<Rank>();
      for (std::size_t i = 0; i < kWindow; ++i)
        rank->window[i] = static_cast<std::byte>((r * 31 + i * 7) & 0xff);
      rank->staging.resize(SlotProxy::staging_bytes(n, options));
      rank->transport = std::make_unique<Transport>(net, r);
      rank->proxy = std::make_unique<SlotProxy>(
          r, n, options, rank->queue.ring(),
          std::vector<LocalWindow>{{rank->window.data(), kWindow}}, kSignals, rank->staging,
          *rank->transport, host_memory(*rank));
      ranks.push_back(std::move(rank));
    }
    for (auto& rank : ranks) EXPECT_TRUE(rank->proxy->start().ok());
  }

  // A kernel of rank `from` posts a put of `bytes` from its window at
  // `src` into `to`'s window at `dst`, adding `add` to signal `signal`.
  void put(int from, int to, std::uint64_t src, std::uint64_t dst, std::uint64_t bytes,
           std::uint32_t signal, std::uint64_t add) {
    const PutRequest r = testing::make_put(to, dst, src, bytes, signal, add);
    ASSERT_EQ(post_request(ranks[static_cast<std::size_t>(from)]->queue.ring(), r, kLongNs),
              PostStatus::posted);
  }

  // Steps every proxy until nothing moves for a few rounds.
  void run(int rounds = 200) {
    for (int i = 0; i < rounds; ++i) {
      for (auto& rank : ranks) (void)rank->proxy->step();
    }
  }
};

TEST(SlotProxy, PutsOfEverySizeLandWholeWithTheirSignal) {
  World w(2, 4, 2);
  const auto before = w.ranks[0]->window;
  // 192 bytes of payload a slot: 1 byte, exactly one slot, several slots, and a bare signal.
  w.put(0, 1, 0, 100, 1, 0, 1);
  w.put(0, 1, 10, 200, 192, 0, 1);
  w.put(0, 1, 500, 1000, 1500, 1, 1500);
  w.put(0, 1, 0, 0, 0, 2, 7);
  w.run();
  auto& dst = w.ranks[1]->window;
  EXPECT_EQ(dst[100], before[0]);
  EXPECT_EQ(std::memcmp(dst.data() + 200, before.data() + 10, 192), 0);
  EXPECT_EQ(std::memcmp(dst.data() + 1000, before.data() + 500, 1500), 0);
  EXPECT_EQ(w.ranks[1]->signals[0], 2u);
  EXPECT_EQ(w.ranks[1]->signals[1], 1500u);
  EXPECT_EQ(w.ranks[1]->signals[2], 7u);
  EXPECT_FALSE(w.ranks[0]->proxy->fault());
  EXPECT_FALSE(w.ranks[1]->proxy->fault());
  EXPECT_EQ(w.ranks[0]->proxy->pending_sends(), 0u);
  EXPECT_EQ(w.ranks[0]->proxy->staged_ticket(), 4u);  // every source may be reused
}

TEST(SlotProxy, FourRanksAllToAllDrainThroughOneStagingSlot) {
  // One send slot and one receive per peer and stream: every slot waits for
  // the one before it, and everything still lands. Sources (3000 on) lie
  // apart from where peers write (below 2700).
  World w(4, 1, 1, 128);
  std::vector<std::vector<std::byte>> before;
  for (auto& r : w.ranks) before.push_back(r->window);
  for (int from = 0; from < 4; ++from) {
    for (int to = 0; to < 4; ++to) {
      if (from != to)
        w.put(from, to, 3000, static_cast<std::uint64_t>(from) * 700, 600,
              static_cast<std::uint32_t>(from), 600);
    }
  }
  w.run(2000);
  for (int to = 0; to < 4; ++to) {
    for (int from = 0; from < 4; ++from) {
      if (from == to) continue;
      auto& dst = w.ranks[static_cast<std::size_t>(to)]->window;
      EXPECT_EQ(std::memcmp(dst.data() + from * 700,
                            before[static_cast<std::size_t>(from)].data() + 3000, 600),
                0)
          << from << " -> " << to;
      EXPECT_EQ(w.ranks[static_cast<std::size_t>(to)]->signals[static_cast<std::size_t>(from)],
                600u);
    }
    EXPECT_FALSE(w.ranks[static_cast<std::size_t>(to)]->proxy->fault());
  }
}

TEST(SlotProxy, AKernelsBadPutIsAFaultNamingItsOwnRank) {
  World w(2, 2, 1);
  w.put(0, 1, kWindow - 10, 0, 20, 0, 1);  // reads past its own window
  w.run(5);
  ASSERT_TRUE(w.ranks[0]->proxy->fault());
  EXPECT_EQ(w.ranks[0]->proxy->fault()->rank, 0);
  EXPECT_NE(w.ranks[0]->proxy->fault()->reason.find("outside"), std::string::npos);
  EXPECT_EQ(w.ranks[1]->signals[0], 0u);
}

TEST(SlotProxy, AStrangersSlotIsAFaultNamingThePeerAndWritesNothing) {
  World w(2, 2, 1);
  const auto before = w.ranks[1]->window;
  SlotHeader h;
  h.src_rank = 0;
  h.sequence = 0;
  h.dst_window = 0;
  h.payload = 100;
  h.dst_offset = kWindow - 50;  // past the end
  h.flags = SlotHeader::k_last;
  h.signal_add = 1;
  h.check = header_check(h);
  std::vector<std::byte> slot(256);
  std::memcpy(slot.data(), &h, sizeof(h));
  w.net.injected[{0, 1, SlotStream::data}] = slot;
  w.run(5);
  ASSERT_TRUE(w.ranks[1]->proxy->fault());
  EXPECT_EQ(w.ranks[1]->proxy->fault()->rank, 0);
  EXPECT_EQ(w.ranks[1]->window, before);
  EXPECT_EQ(w.ranks[1]->signals[0], 0u);
}

TEST(SlotProxy, ADeadPeerIsNamedBySendersAndReceivers) {
  World w(3, 2, 1);
  w.net.dead.insert(2);
  w.put(0, 2, 0, 0, 64, 0, 1);
  w.run(5);
  ASSERT_TRUE(w.ranks[0]->proxy->fault());
  EXPECT_EQ(w.ranks[0]->proxy->fault()->rank, 2);
  ASSERT_TRUE(w.ranks[1]->proxy->fault());  // its receive from rank 2 fails
  EXPECT_EQ(w.ranks[1]->proxy->fault()->rank, 2);
}

TEST(SlotProxy, StartRefusesWhatCannotWork) {
  Network net;
  Transport t(net, 0);
  RequestQueueStorage q(4);
  std::vector<std::byte> window(64), staging(16);
  Rank rank;
  SlotProxyOptions options;
  options.geometry = *SlotGeometry::make(128);
  SlotProxy small(0, 2, options, q.ring(), {{window.data(), 64}}, 1, staging, t, host_memory(rank));
  auto started = small.start();
  ASSERT_FALSE(started.ok());
  EXPECT_NE(started.error().message.find("staging"), std::string::npos);
  options.send_slots = 0;
  std::vector<std::byte> enough(SlotProxy::staging_bytes(2, options) + 4096);
  SlotProxy none(0, 2, options, q.ring(), {{window.data(), 64}}, 1, enough, t, host_memory(rank));
  EXPECT_FALSE(none.start().ok());
  options.send_slots = 2;
  SlotProxy alone(0, 1, options, q.ring(), {{window.data(), 64}}, 1, enough, t, host_memory(rank));
  EXPECT_FALSE(alone.start().ok());
}

}  // namespace
}  // namespace epkit::ep::network_leg
#endif  // EPKIT_WITH_CUDA
