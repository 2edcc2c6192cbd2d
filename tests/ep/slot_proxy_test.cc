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
#include "ep/slot_world.h"

namespace epkit::ep::network_leg {
namespace {

constexpr std::uint64_t kWindow = testing::kSlotWindow;

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

using testing::SlotRank;

// The in-memory transport's world: SlotWorld connected through one Network.
struct World : testing::SlotWorld {
  Network net;
  World(int n, std::uint32_t send_slots, std::uint32_t receives, std::uint32_t slot_bytes = 256)
      : SlotWorld(n, send_slots, receives, slot_bytes) {
    connect([this](int r, SlotRank&) { return std::make_unique<Transport>(net, r); });
  }
};

TEST(SlotProxy, PutsOfEverySizeLandWholeWithTheirSignal) {
  World w(2, 4, 2);
  const auto before = w.post_every_size();
  w.run();
  w.expect_every_size(before);
  EXPECT_EQ(w.ranks[0]->proxy->pending_sends(), 0u);
  EXPECT_EQ(w.ranks[0]->proxy->staged_ticket(), 4u);  // every source may be reused
}

TEST(SlotProxy, FourRanksAllToAllDrainThroughOneStagingSlot) {
  // One send slot and one receive per peer and stream: every slot waits for
  // the one before it, and everything still lands.
  World w(4, 1, 1, 128);
  w.all_to_all(2000);
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
  SlotProxyOptions options;
  options.geometry = *SlotGeometry::make(128);
  SlotProxy small(0, 2, options, q.ring(), {{window.data(), 64}}, 1, staging, t,
                  testing::host_slot_memory(nullptr));
  auto started = small.start();
  ASSERT_FALSE(started.ok());
  EXPECT_NE(started.error().message.find("staging"), std::string::npos);
  options.send_slots = 0;
  std::vector<std::byte> enough(SlotProxy::staging_bytes(2, options) + 4096);
  SlotProxy none(0, 2, options, q.ring(), {{window.data(), 64}}, 1, enough, t,
                 testing::host_slot_memory(nullptr));
  EXPECT_FALSE(none.start().ok());
  options.send_slots = 2;
  SlotProxy twice(0, 2, options, q.ring(), {{window.data(), 64}}, 1, enough, t,
                  testing::host_slot_memory(nullptr));
  EXPECT_TRUE(twice.start().ok());
  EXPECT_FALSE(twice.start().ok());  // its receives are posted already
  SlotProxy alone(0, 1, options, q.ring(), {{window.data(), 64}}, 1, enough, t,
                  testing::host_slot_memory(nullptr));
  EXPECT_FALSE(alone.start().ok());
}

}  // namespace
}  // namespace epkit::ep::network_leg
#endif  // EPKIT_WITH_CUDA
