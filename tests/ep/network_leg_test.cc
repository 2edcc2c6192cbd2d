// The rebuilt internode leg's host-side pieces that need no GPU: the memory
// it plans per GPU (fixed by ring sizes, the node count only through small
// per-peer terms) and the device contract's layout.
#ifdef EPKIT_WITH_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ep/network_leg/leg.h"
#include "ep/network_leg/sizing.h"

namespace epkit::ep::network_leg {
namespace {

// DeepEP's test_internode.py: 4096 tokens, hidden 7168, BF16, top-8, 256
// experts, 8 ranks per node, 24 SMs (12 channels).
LegShape deepep_test(int nodes) {
  LegShape s;
  s.nodes = nodes;
  return s;
}

TEST(NetworkLegSizing, RowIsDeepEpV1sRow) {
  auto b = size_leg(deepep_test(2));
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b.value().row_pitch,
            14416u);  // 14336 x + 32 indices + 32 weights + 8 source meta, 16-aligned
  EXPECT_EQ(b.value().total, 443029008u);  // the figure docs/ep-internode.md gives for 2 nodes
}

TEST(NetworkLegSizing, Fp8RowCarriesScales) {
  auto s = deepep_test(2);
  s.element_bytes = 1;
  auto b = size_leg(s);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b.value().row_pitch, 7472u);  // 7168 + 56 x 4 scales + 64 + 8 = 7464, aligned
}

TEST(NetworkLegSizing, NodeCountChangesMemoryByLessThanTenPercentFrom2To32) {
  auto two = size_leg(deepep_test(2));
  ASSERT_TRUE(two.ok()) << two.error().message;
  const auto base = static_cast<double>(two.value().total);
  for (int nodes : {2, 4, 8, 16, 32}) {
    auto b = size_leg(deepep_test(nodes));
    ASSERT_TRUE(b.ok()) << nodes << " nodes: " << b.error().message;
    const auto total = static_cast<double>(b.value().total);
    EXPECT_LE(std::abs(total - base) / base, 0.10)
        << nodes << " nodes: " << total << " bytes vs " << base;
    // The network rings never exceed R slots per channel and direction.
    EXPECT_LE(b.value().network_rings, 2u * 12u * 256u * 14416u) << nodes << " nodes";
  }
}

TEST(NetworkLegSizing, DeepEpDefaultBudgetTakes4096TokensAt4And16Nodes) {
  // test_internode.py passes num_nvl_bytes 2e9 and num_rdma_bytes 1e9; epkit's
  // budget is their sum.
  constexpr double budget = 2e9 + 1e9;
  for (int nodes : {4, 16}) {
    auto s = deepep_test(nodes);
    ASSERT_EQ(s.max_tokens, 4096);
    auto b = size_leg(s);
    ASSERT_TRUE(b.ok()) << nodes << " nodes: " << b.error().message;
    EXPECT_LE(static_cast<double>(b.value().total), budget) << nodes << " nodes";
  }
}

TEST(NetworkLegSizing, OneNodeHasNoNetworkRings) {
  auto b = size_leg(deepep_test(1));
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b.value().slots_per_peer, 0);
  EXPECT_EQ(b.value().network_rings, 0u);
  EXPECT_GT(b.value().nvl_rings, 0u);
}

TEST(NetworkLegSizing, RingTooSmallForTheNodesIsRefusedWithTheFix) {
  auto s = deepep_test(32);
  s.network_ring_slots = 64;  // 2 per remote node, fewer than two chunks of 4
  auto b = size_leg(s);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code, ErrorCode::invalid);
  EXPECT_NE(b.error().message.find("32 nodes"), std::string::npos) << b.error().message;
  EXPECT_NE(b.error().message.find("at least 248"), std::string::npos) << b.error().message;
}

TEST(NetworkLegSizing, OutOfRangeFieldIsNamed) {
  auto s = deepep_test(2);
  s.ranks_per_node = 9;
  auto b = size_leg(s);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("ranks_per_node = 9"), std::string::npos) << b.error().message;
}

TEST(NetworkLegInterface, PutRequestLayoutAndBackendNames) {
  EXPECT_EQ(sizeof(PutRequest), 56u);
  EXPECT_STREQ(to_string(BackendKind::emulated_nic), "emulated NIC");
  EXPECT_STREQ(to_string(BackendKind::nccl_proxy), "NCCL proxy");
  EXPECT_STREQ(to_string(BackendKind::nccl_gin), "NCCL GIN");
}

}  // namespace
}  // namespace epkit::ep::network_leg
#endif
