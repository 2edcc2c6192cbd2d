// The NCCL proxy backend's round transport (ep/network_leg/slot_rounds.h)
// on the CPU: SlotProxy over RoundTransport over an in-memory hub that
// behaves as NCCL's grouped send/recv does (per pair, sends meet receives in
// posting order and their sizes must be equal, or it is an error: the thing
// the rounds exist to guarantee). Puts land whole, credits bound what is
// sent, and a peer's bad control block or death is named.
#ifdef EPKIT_WITH_CUDA
#include "ep/network_leg/slot_rounds.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ep/slot_world.h"

namespace epkit::ep::network_leg {
namespace {

using testing::SlotRank;
using testing::SlotWorld;

// Rounds of every rank on one hub. A posted op waits in its pair's queue
// until the mirror op comes; a round is done when all of its ops are.
class Hub {
 public:
  struct Op {
    const std::byte* send = nullptr;
    std::byte* recv = nullptr;
    std::size_t bytes = 0;
    int* pending = nullptr;  // its round's count of unmatched ops
  };
  std::map<std::pair<int, int>, std::deque<Op>> sends, receives;  // by (source, destination)
  std::set<int> dead;
  std::string mismatch;
  int rounds_posted = 0;
  // Changes a control block in flight (sender, bytes).
  std::function<void(int, std::byte*)> tamper;

  void match() {
    for (auto& [pair, out] : sends) {
      auto& in = receives[pair];
      while (!out.empty() && !in.empty()) {
        Op s = out.front(), r = in.front();
        out.pop_front();
        in.pop_front();
        if (s.bytes != r.bytes) {
          mismatch = "rank " + std::to_string(pair.first) + " sent " + std::to_string(s.bytes) +
                     " bytes to rank " + std::to_string(pair.second) + ", which received " +
                     std::to_string(r.bytes);
        }
        std::memcpy(r.recv, s.send, std::min(s.bytes, r.bytes));
        if (tamper) tamper(pair.first, r.recv);
        --*s.pending;
        --*r.pending;
      }
    }
  }
};

class HubExchange final : public RoundExchange {
 public:
  HubExchange(Hub& hub, int rank) : m_hub(&hub), m_rank(rank) {}
  Result<void> post(std::span<const RoundPart> parts) override {
    if (m_pending > 0)
      return make_error(ErrorCode::internal, "a round posted over an unfinished one");
    ++m_hub->rounds_posted;
    for (const RoundPart& p : parts) {
      if (p.send_bytes > 0) {
        m_hub->sends[{m_rank, p.peer}].push_back({p.send, nullptr, p.send_bytes, &m_pending});
        ++m_pending;
      }
      if (p.recv_bytes > 0) {
        m_hub->receives[{p.peer, m_rank}].push_back({nullptr, p.recv, p.recv_bytes, &m_pending});
        ++m_pending;
        m_peers.insert(p.peer);
      }
    }
    return {};
  }
  Result<bool> done() override {
    m_hub->match();
    if (!m_hub->mismatch.empty()) return make_error(ErrorCode::internal, m_hub->mismatch);
    if (m_pending == 0) {
      m_peers.clear();
      return true;
    }
    for (int peer : m_peers) {
      if (m_hub->dead.count(peer) != 0) {
        m_failed = peer;
        return make_error(ErrorCode::unavailable, "rank " + std::to_string(peer) + " is gone");
      }
    }
    return false;
  }
  int failed_peer() const override { return m_failed; }

 private:
  Hub* m_hub;
  int m_rank;
  int m_pending = 0;
  std::set<int> m_peers;
  int m_failed = -1;
};

struct RoundWorld : SlotWorld {
  static constexpr std::int64_t kRoundTimeoutNs = 1'000'000;
  Hub control, data;
  std::vector<std::unique_ptr<HubExchange>> exchanges;
  std::int64_t now_ns = 0;  // every rank's clock: the test moves it
  RoundWorld(int n, std::uint32_t send_slots, std::uint32_t receives, std::uint32_t max_data,
             std::uint32_t slot_bytes = 256)
      : SlotWorld(n, send_slots, receives, slot_bytes) {
    connect([this, max_data](int r, SlotRank&) {
      exchanges.push_back(std::make_unique<HubExchange>(control, r));
      RoundExchange& c = *exchanges.back();
      exchanges.push_back(std::make_unique<HubExchange>(data, r));
      RoundExchange& d = *exchanges.back();
      return std::make_unique<RoundTransport>(r, static_cast<int>(ranks.size()), options.geometry,
                                              max_data, c, d, testing::host_slot_memory(nullptr),
                                              kRoundTimeoutNs, [this] { return now_ns; });
    });
  }
};

TEST(SlotRounds, PutsLandWholeThroughMatchedRounds) {
  // 1500 bytes are 8 slots: four data phases at 2 a round; the bare signal
  // goes inline in a control block; and a put the other way at once.
  RoundWorld w(2, 4, 2, 2);
  const auto before = w.post_every_size();
  w.put(1, 0, 0, 3000, 300, 3, 1);
  w.run(400);
  EXPECT_TRUE(w.control.mismatch.empty()) << w.control.mismatch;
  EXPECT_TRUE(w.data.mismatch.empty()) << w.data.mismatch;
  w.expect_every_size(before);
  EXPECT_EQ(w.ranks[0]->signals[3], 1u);
}

TEST(SlotRounds, FourRanksAllToAllWithOneReceiveAPeer) {
  // One receive per peer and stream: every data slot waits for a credit.
  RoundWorld w(4, 2, 1, 4, 128);
  w.all_to_all(3000);
  EXPECT_TRUE(w.data.mismatch.empty()) << w.data.mismatch;
}

TEST(SlotRounds, ABlockClaimingMoreSlotsThanCreditsIsNamed) {
  RoundWorld w(2, 4, 2, 2);
  w.control.tamper = [](int sender, std::byte* block) {
    if (sender != 0) return;
    ControlBlock b;
    std::memcpy(&b, block, sizeof(b));
    b.data_slots = 2;  // rank 1 posted receives, but rank 0 "sends" before any credit reached it
    b.data_credits = 0;
    std::memcpy(block, &b, sizeof(b));
  };
  w.run(3);
  ASSERT_TRUE(w.ranks[1]->proxy->fault());
  EXPECT_EQ(w.ranks[1]->proxy->fault()->rank, 0);
  EXPECT_NE(w.ranks[1]->proxy->fault()->reason.find("bad control block"), std::string::npos)
      << w.ranks[1]->proxy->fault()->reason;
}

TEST(SlotRounds, AStaleRoundNumberIsNamed) {
  RoundWorld w(3, 2, 1, 2);
  w.control.tamper = [](int sender, std::byte* block) {
    if (sender != 2) return;
    ControlBlock b;
    std::memcpy(&b, block, sizeof(b));
    b.round += 5;
    std::memcpy(block, &b, sizeof(b));
  };
  w.run(3);
  for (int r : {0, 1}) {
    ASSERT_TRUE(w.ranks[static_cast<std::size_t>(r)]->proxy->fault()) << r;
    EXPECT_EQ(w.ranks[static_cast<std::size_t>(r)]->proxy->fault()->rank, 2);
  }
}

TEST(SlotRounds, ADeadPeerIsNamedByEverySurvivor) {
  RoundWorld w(3, 2, 1, 2);
  w.run(5);  // rounds run while healthy
  ASSERT_FALSE(w.ranks[0]->proxy->fault());
  w.control.dead.insert(2);
  // Rank 2 stops taking part: the survivors' next round never completes.
  for (int i = 0; i < 10; ++i) {
    for (int r : {0, 1}) (void)w.ranks[static_cast<std::size_t>(r)]->proxy->step();
  }
  for (int r : {0, 1}) {
    ASSERT_TRUE(w.ranks[static_cast<std::size_t>(r)]->proxy->fault()) << r;
    EXPECT_EQ(w.ranks[static_cast<std::size_t>(r)]->proxy->fault()->rank, 2);
  }
}

TEST(SlotRounds, ARoundAPeerNeverJoinsTimesOut) {
  // Rank 2 stops stepping without being marked dead: nothing reports it but
  // the round's bound.
  RoundWorld w(3, 2, 1, 2);
  w.run(5);
  for (int i = 0; i < 10; ++i) {
    for (int r : {0, 1}) (void)w.ranks[static_cast<std::size_t>(r)]->proxy->step();
  }
  EXPECT_FALSE(w.ranks[0]->proxy->fault());  // within the bound: still waiting
  w.now_ns += RoundWorld::kRoundTimeoutNs + 1;
  for (int r : {0, 1}) (void)w.ranks[static_cast<std::size_t>(r)]->proxy->step();
  for (int r : {0, 1}) {
    ASSERT_TRUE(w.ranks[static_cast<std::size_t>(r)]->proxy->fault()) << r;
    EXPECT_NE(w.ranks[static_cast<std::size_t>(r)]->proxy->fault()->reason.find("did not finish"),
              std::string::npos);
  }
}

TEST(SlotRounds, CreditsBeyondTheBoundAreRefused) {
  RoundWorld w(2, 2, 1, 2);
  w.control.tamper = [](int sender, std::byte* block) {
    if (sender != 0) return;
    ControlBlock b;
    std::memcpy(&b, block, sizeof(b));
    b.data_credits = 1u << 19;  // two of these pass the bound of 2^20 outstanding
    std::memcpy(block, &b, sizeof(b));
  };
  w.run(4);
  ASSERT_TRUE(w.ranks[1]->proxy->fault());
  EXPECT_EQ(w.ranks[1]->proxy->fault()->rank, 0);
  EXPECT_NE(w.ranks[1]->proxy->fault()->reason.find("outstanding"), std::string::npos)
      << w.ranks[1]->proxy->fault()->reason;
}

TEST(SlotRounds, BadPostsAreRefused) {
  Hub hub;
  HubExchange c(hub, 0), d(hub, 0);
  RoundTransport t(0, 2, *SlotGeometry::make(128), 2, c, d, testing::host_slot_memory(nullptr),
                   1'000'000);
  std::vector<std::byte> slot(256);
  EXPECT_FALSE(t.post_send(0, SlotStream::data, slot.data(), 128, 1).ok());  // itself
  EXPECT_FALSE(t.post_send(2, SlotStream::data, slot.data(), 128, 1).ok());  // outside
  EXPECT_FALSE(t.post_send(1, SlotStream::data, slot.data(), 129, 1).ok());  // over a slot
  EXPECT_FALSE(
      t.post_send(1, SlotStream::control, slot.data(), 128, 1).ok());  // a control slot is a header
  EXPECT_FALSE(
      t.post_recv(1, SlotStream::data, slot.data(), 64, 1).ok());  // a data receive is a slot
  EXPECT_FALSE(t.post_recv(1, SlotStream::data, nullptr, 128, 1).ok());
  EXPECT_TRUE(t.post_recv(1, SlotStream::data, slot.data(), 128, 1).ok());
}

}  // namespace
}  // namespace epkit::ep::network_leg
#endif  // EPKIT_WITH_CUDA
