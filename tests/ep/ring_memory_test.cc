// Ring mode's memory (ep/internode/ring_memory.h): fixed by the ring sizes,
// so DeepEP's test sizes take the same bytes at 2 and 32 nodes and fit
// DeepEP's default budget at any node count; the map's regions do not
// overlap; bad ring options are refused by name.
#include "ep/internode/ring_memory.h"

#include <epkit/ep.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "ep/internode/buffer.h"
#include "ep/internode/checks.h"

namespace epkit::ep {
namespace {

// DeepEP's test_internode.py: 4096 tokens, hidden 7168, top-8, 8 GPUs a node.
BufferOptions deepep_sizes() {
  BufferOptions o;
  o.max_tokens = 4096;
  o.max_hidden = 7168;
  o.max_topk = 8;
  o.ranks_per_node = 8;
  o.network_leg = BufferOptions::NetworkLeg::emulated_nic;
  o.internode_rings = true;
  return o;
}

TEST(RingMemory, TheSameBytesAtTwoAndThirtyTwoNodes) {
  // The Buffer's own memory: what it needs on a NIC that maps no remote
  // window. The emulated NIC maps every other rank's window, 1/512 of it a
  // rank more (the next test), which only the emulator pays.
  const BufferOptions o = deepep_sizes();
  const auto own = [&](int ranks) {
    return Buffer::bytes_needed(o, ranks) - emulated_mapping_bytes(o, ranks);
  };
  const std::size_t two = own(16);
  const std::size_t thirty_two = own(256);
  const double spread = static_cast<double>(std::max(two, thirty_two)) /
                        static_cast<double>(std::min(two, thirty_two));
  EXPECT_LT(spread, 1.10) << two << " bytes at 2 nodes, " << thirty_two << " at 32";
  for (int nodes : {2, 4, 16, 32})
    std::printf(
        "ring mode, DeepEP's test sizes, %d nodes: %.1f MB per GPU (%.1f MB more on the "
        "emulated NIC)\n",
        nodes, static_cast<double>(own(nodes * 8)) / 1e6,
        static_cast<double>(emulated_mapping_bytes(o, nodes * 8)) / 1e6);
  // Today's mode grows with the nodes (about 1.19 GB a node at these sizes).
  BufferOptions old = o;
  old.internode_rings = false;
  EXPECT_GT(Buffer::bytes_needed(old, 256), 10 * Buffer::bytes_needed(old, 16) / 2);
  EXPECT_LT(two, Buffer::bytes_needed(old, 16));
}

TEST(RingMemory, TheComputationMatchesWhatTheH200Measured) {
  // Measured on nvidia-h200 under MPS (2026-11-29, tests/gpu/ep_leg_host_time's
  // leg_memory line: the GPU's free memory before and after every rank made a
  // second Buffer, per rank), 4096 tokens, hidden 7168, top-8, on the
  // emulated NIC, at 1 and 2 ranks a node and three network ring sizes.
  struct Point {
    int ranks, nodes, network_rows, nvl_rows;
    double measured_mb;
  };
  const Point points[] = {
      {2, 2, 512, 256, 140.51},  {4, 4, 512, 256, 141.03},  {4, 2, 512, 256, 155.71},
      {8, 4, 512, 256, 157.02},  {8, 4, 512, 256, 156.76},  {16, 8, 512, 256, 158.73},
      {8, 4, 1024, 256, 216.53}, {8, 4, 2048, 256, 335.54}, {8, 4, 512, 512, 186.38}};
  for (const Point& p : points) {
    BufferOptions o = deepep_sizes();
    o.ranks_per_node = p.ranks / p.nodes;
    o.ring_network_rows = p.network_rows;
    o.ring_nvl_rows = p.nvl_rows;
    const double computed = static_cast<double>(Buffer::bytes_needed(o, p.ranks)) / 1e6;
    EXPECT_NEAR(computed, p.measured_mb, p.measured_mb * 0.005)
        << p.ranks << " ranks on " << p.nodes << " nodes, rings " << p.network_rows << "/"
        << p.nvl_rows;
    std::printf("ring mode, %d ranks on %d nodes, rings %d/%d: %.2f MB computed, %.2f measured\n",
                p.ranks, p.nodes, p.network_rows, p.nvl_rows, computed, p.measured_mb);
  }
}

TEST(RingMemory, DeepEpsDefaultBudgetTakesItsDefaultTokensAtFourAndSixteenNodes) {
  BufferOptions o = deepep_sizes();
  o.num_bytes = static_cast<std::size_t>(2e9 + 1e9);  // num_nvl_bytes + num_rdma_bytes
  for (int nodes : {2, 4, 16, 32}) {
    auto ok = check_internode_options(o, nodes * 8);
    EXPECT_TRUE(ok) << nodes << " nodes: " << (ok ? "" : ok.error().message);
  }
  BufferOptions old = o;
  old.internode_rings = false;
  EXPECT_FALSE(check_internode_options(old, 4 * 8)) << "today's mode is refused at 4 nodes";
}

TEST(RingMemory, RegionsDoNotOverlapAndRingsHoldTwoChunks) {
  for (int nodes : {2, 3, 4, 16, 32}) {
    for (int per : {1, 2, 8}) {
      BufferOptions o = deepep_sizes();
      o.ranks_per_node = per;
      auto m = ring_memory(o, nodes * per);
      ASSERT_TRUE(m) << m.error().message;
      const k::RingShape& s = m->shape;
      // Every shape the options allow is one the kernels take (on a leg
      // whose producers move the bytes), and none without one.
      network_leg::DeviceLeg leg;
      EXPECT_FALSE(s.launchable(leg));
      std::uint64_t grants = 0;
      leg.grants = &grants;
      EXPECT_TRUE(s.launchable(leg)) << nodes << " x " << per;
      EXPECT_GE(s.net_chunks, 2);
      EXPECT_GE(s.nvl_slots, 2);
      EXPECT_GE(s.message_ints,
                k::RingShape::min_message_ints(s.channels, m->max_experts_per_rank));
      std::vector<std::pair<std::size_t, std::size_t>> r = {
          {s.net_send, s.net_send + s.channels * nodes * s.ring_bytes()},
          {s.net_recv, s.net_recv + s.channels * nodes * s.ring_bytes()},
          {s.messages_in, s.messages_in + 2ull * nodes * per * s.message_ints * 4},
          {s.messages_out, s.messages_out + 1ull * nodes * per * s.message_ints * 4},
          {m->net_sent, m->counters_end},
          {m->out_x, m->out_x + 4096ull * 7168 * 2},
          {m->out_w, m->out_w + 4096ull * 8 * 4},
          {m->per_rank, m->per_rank + nodes * per * 4},
          {m->in_rank, m->in_rank + 4096ull * nodes * per},
          {m->leg_done, m->leg_done + nodes * k::k_leg_chunks * 4}};
      std::sort(r.begin(), r.end());
      for (std::size_t i = 0; i + 1 < r.size(); ++i)
        EXPECT_LE(r[i].second, r[i + 1].first) << nodes << " x " << per << ": region " << i;
      EXPECT_LE(r.back().second, m->total);
      // The signals: messages, tails, credits, each index inside the count.
      EXPECT_EQ(s.credit_signal(s.channels - 1, nodes - 1) + 1, s.num_signals());
      EXPECT_LT(s.tail_signal(s.channels - 1, nodes - 1, s.net_chunks - 1), s.credit_signal(0, 0));
    }
  }
}

TEST(RingMemory, BadRingOptionsAreNamed) {
  const std::pair<void (*)(BufferOptions&), const char*> cases[] = {
      {[](BufferOptions& o) { o.ring_channels = 0; }, "ring_channels"},
      {[](BufferOptions& o) { o.ring_channels = 33; }, "ring_channels"},
      {[](BufferOptions& o) { o.ring_chunk_rows = 0; }, "ring_chunk_rows"},
      {[](BufferOptions& o) { o.ring_chunk_rows = 64; }, "ring_chunk_rows"},
      {[](BufferOptions& o) { o.ring_network_rows = 8; }, "ring_network_rows"},
      {[](BufferOptions& o) { o.ring_nvl_rows = 1; }, "ring_nvl_rows"},
  };
  for (const auto& [bend, name] : cases) {
    BufferOptions o = deepep_sizes();
    bend(o);
    auto ok = check_internode_options(o, 16);
    ASSERT_FALSE(ok) << name;
    EXPECT_NE(ok.error().message.find(name), std::string::npos) << ok.error().message;
  }
  BufferOptions nccl = deepep_sizes();
  nccl.network_leg = BufferOptions::NetworkLeg::nccl_host;
  auto refused = check_internode_options(nccl, 16);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("device-driven"), std::string::npos);
}

}  // namespace
}  // namespace epkit::ep
