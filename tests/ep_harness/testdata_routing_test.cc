#ifdef EPKIT_WITH_CUDA

#include "ep_harness/testdata_routing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace epkit::harness {
namespace {

TestInputOptions small(int rank) {
  TestInputOptions o;
  o.shape = TestShape{64, 256, 4, 32};
  o.seed = 11;
  o.rank = rank;
  o.num_ranks = 4;
  return o;
}

TEST(TestRouting, DistinctExpertsInRangeAndDeterministic) {
  auto a = make_test_routing(small(1));
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_EQ(a->topk_idx.size(), 64u * 4);
  for (std::size_t t = 0; t < 64; ++t) {
    std::set<std::int64_t> seen(a->topk_idx.begin() + static_cast<std::ptrdiff_t>(t * 4),
                                a->topk_idx.begin() + static_cast<std::ptrdiff_t>(t * 4 + 4));
    EXPECT_EQ(seen.size(), 4u) << "token " << t;
    for (auto e : seen) {
      EXPECT_GE(e, 0);
      EXPECT_LT(e, 32);
    }
  }
  auto again = make_test_routing(small(1));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->topk_idx, a->topk_idx);
  EXPECT_EQ(again->topk_weights, a->topk_weights);

  auto other_rank = make_test_routing(small(2));
  ASSERT_TRUE(other_rank.ok());
  EXPECT_NE(other_rank->topk_idx, a->topk_idx);
  auto other_seed_options = small(1);
  other_seed_options.seed = 12;
  auto other_seed = make_test_routing(other_seed_options);
  ASSERT_TRUE(other_seed.ok());
  EXPECT_NE(other_seed->topk_idx, a->topk_idx);
}

TEST(TestRouting, MaskedFractionSetsThatShareOfSlots) {
  auto o = small(0);
  o.masked_fraction = 0.25;
  auto r = make_test_routing(o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(std::count(r->topk_idx.begin(), r->topk_idx.end(), -1), 64);
  // The unmasked slots keep the experts drawn without a mask.
  auto plain = make_test_routing(small(0));
  ASSERT_TRUE(plain.ok());
  for (std::size_t i = 0; i < r->topk_idx.size(); ++i) {
    if (r->topk_idx[i] != -1) {
      EXPECT_EQ(r->topk_idx[i], plain->topk_idx[i]);
    }
  }

  o.masked_fraction = 1.0;
  auto all = make_test_routing(o);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(std::count(all->topk_idx.begin(), all->topk_idx.end(), -1), 64 * 4);
}

TEST(TestRouting, OnlyRankDrawsFromThatRank) {
  auto o = small(3);
  o.only_rank = 2;  // experts 16..23
  auto r = make_test_routing(o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  for (auto e : r->topk_idx) {
    EXPECT_GE(e, 16);
    EXPECT_LT(e, 24);
  }
}

TEST(TestRouting, RankConstantWeights) {
  auto o = small(3);
  o.kind = XKind::rank_constant;
  auto r = make_test_routing(o);
  ASSERT_TRUE(r.ok());
  for (float w : r->topk_weights) EXPECT_EQ(w, 3.0f);
  auto random = make_test_routing(small(3));
  ASSERT_TRUE(random.ok());
  EXPECT_NE(std::count(random->topk_weights.begin(), random->topk_weights.end(), 3.0f),
            static_cast<std::ptrdiff_t>(random->topk_weights.size()));
}

TEST(TestRouting, RejectsShapesItCannotMake) {
  auto o = small(0);
  o.shape.hidden = 200;
  EXPECT_FALSE(make_test_routing(o).ok());
  o = small(0);
  o.shape.num_experts = 30;
  EXPECT_FALSE(make_test_routing(o).ok());
  o = small(0);
  o.only_rank = 1;
  o.shape.num_topk = 9;  // rank 1 has 8 experts
  auto r = make_test_routing(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("top-9 of 8"), std::string::npos) << r.error().message;
  o = small(0);
  o.masked_fraction = 1.5;
  EXPECT_FALSE(make_test_routing(o).ok());
  o = small(0);
  o.shape.num_tokens = 0;
  auto empty = make_test_routing(o);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->topk_idx.empty());
}

}  // namespace
}  // namespace epkit::harness

#endif
