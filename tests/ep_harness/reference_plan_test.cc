#ifdef EPKIT_WITH_CUDA

#include "ep_harness/reference_plan.h"

#include <gtest/gtest.h>

#include <random>

namespace epkit::harness {
namespace {

// Every rank's layout from every rank's top-k, as the ranks would see them.
std::vector<HostLayout> layouts(const std::vector<std::vector<std::int64_t>>& topk, int topk_n,
                                int experts) {
  std::vector<HostLayout> out;
  for (const auto& t : topk) {
    auto l = host_layout(t, static_cast<int>(t.size()) / topk_n, topk_n, experts,
                         static_cast<int>(topk.size()));
    EXPECT_TRUE(l.ok());
    out.push_back(*l);
  }
  return out;
}

std::vector<int> gathered_counts(const std::vector<HostLayout>& all) {
  std::vector<int> out;
  for (const auto& l : all)
    out.insert(out.end(), l.num_tokens_per_rank.begin(), l.num_tokens_per_rank.end());
  return out;
}

TEST(ReferencePlan, TwoRanksByHand) {
  // 4 experts over 2 ranks (0-1 on rank 0, 2-3 on rank 1), top-2.
  // Rank 0: t0 -> r0; t1 -> r0, r1; t2 -> r1.   Rank 1: t0 -> r1; t1 -> nowhere.
  auto all = layouts({{0, 1, 1, 3, 2, -1}, {3, 2, -1, -1}}, 2, 4);
  auto counts = gathered_counts(all);
  EXPECT_EQ(counts, (std::vector<int>{2, 2, 0, 1}));

  auto p0 = plan_dispatch(all[0], counts, 0);
  ASSERT_TRUE(p0.ok()) << p0.error().message;
  // (i, j): rows rank j receives from ranks 0..i.
  EXPECT_EQ(p0->rank_prefix_matrix, (std::vector<int>{2, 2, 2, 3}));
  EXPECT_EQ(p0->num_recv_tokens, 2);
  EXPECT_EQ(p0->send_row, (std::vector<int>{0, -1,  //
                                            1, 0,   //
                                            -1, 1}));
  EXPECT_EQ(p0->send_count, (std::vector<int>{2, 2}));
  EXPECT_EQ(p0->send_offset, (std::vector<int>{0, 2}));
  EXPECT_EQ(p0->packed_token, (std::vector<int>{0, 1, 1, 2}));
  EXPECT_EQ(p0->packed_row, (std::vector<int>{0, -1, 1, 2, -1, 3}));
  EXPECT_EQ(p0->recv_count, (std::vector<int>{2, 0}));
  EXPECT_EQ(p0->recv_offset, (std::vector<int>{0, 2}));

  auto p1 = plan_dispatch(all[1], counts, 1);
  ASSERT_TRUE(p1.ok()) << p1.error().message;
  EXPECT_EQ(p1->num_recv_tokens, 3);
  // Rank 1's single row goes after rank 0's two rows on rank 1.
  EXPECT_EQ(p1->send_row, (std::vector<int>{-1, 2, -1, -1}));
  EXPECT_EQ(p1->recv_count, (std::vector<int>{2, 1}));
  EXPECT_EQ(p1->recv_offset, (std::vector<int>{0, 2}));
  EXPECT_EQ(p1->packed_token, (std::vector<int>{0}));
}

TEST(ReferencePlan, RandomRoutingIsAConsistentPermutation) {
  // Simulates the exchange on the host: every receive row is written by
  // exactly one (source, token) and the sizes agree on both sides.
  const int ranks = 4;
  const int experts = 16;
  const int topk_n = 3;
  std::mt19937 rng(7);
  std::vector<std::vector<std::int64_t>> topk(ranks);
  for (int r = 0; r < ranks; ++r) {
    int tokens = r == 2 ? 0 : 5 + r * 3;  // rank 2 has no tokens
    for (int t = 0; t < tokens * topk_n; ++t)
      topk[static_cast<std::size_t>(r)].push_back(static_cast<int>(rng() % (experts + 1)) - 1);
  }
  auto all = layouts(topk, topk_n, experts);
  auto counts = gathered_counts(all);
  std::vector<DispatchPlan> plans;
  for (int r = 0; r < ranks; ++r) {
    auto p = plan_dispatch(all[static_cast<std::size_t>(r)], counts, r);
    ASSERT_TRUE(p.ok()) << p.error().message;
    plans.push_back(*p);
  }
  for (int dst = 0; dst < ranks; ++dst) {
    const auto& pd = plans[static_cast<std::size_t>(dst)];
    std::vector<int> writer(static_cast<std::size_t>(pd.num_recv_tokens), -1);
    for (int src = 0; src < ranks; ++src) {
      const auto& ps = plans[static_cast<std::size_t>(src)];
      EXPECT_EQ(ps.send_count[static_cast<std::size_t>(dst)],
                pd.recv_count[static_cast<std::size_t>(src)]);
      int last = -1;
      for (int t = 0; t < ps.num_tokens; ++t) {
        int row = ps.send_row[static_cast<std::size_t>(t * ranks + dst)];
        int packed = ps.packed_row[static_cast<std::size_t>(t * ranks + dst)];
        ASSERT_EQ(row >= 0, packed >= 0);
        if (row < 0) continue;
        // Within the source's segment, in token order, one row per token.
        EXPECT_GE(row, pd.recv_offset[static_cast<std::size_t>(src)]);
        EXPECT_LT(row, pd.recv_offset[static_cast<std::size_t>(src)] +
                           pd.recv_count[static_cast<std::size_t>(src)]);
        EXPECT_GT(row, last);
        last = row;
        EXPECT_EQ(writer[static_cast<std::size_t>(row)], -1);
        writer[static_cast<std::size_t>(row)] = src;
        // The packed send position matches the receive position, so NCCL's
        // contiguous segments line up.
        EXPECT_EQ(packed - ps.send_offset[static_cast<std::size_t>(dst)],
                  row - pd.recv_offset[static_cast<std::size_t>(src)]);
        EXPECT_EQ(ps.packed_token[static_cast<std::size_t>(packed)], t);
      }
    }
    for (int w : writer) EXPECT_GE(w, 0);
  }
  // Combine rebuilds the same plan from the matrix.
  for (int r = 0; r < ranks; ++r) {
    const auto& p = plans[static_cast<std::size_t>(r)];
    auto again = plan_from_prefix(all[static_cast<std::size_t>(r)], p.rank_prefix_matrix, r);
    ASSERT_TRUE(again.ok()) << again.error().message;
    EXPECT_EQ(again->send_row, p.send_row);
    EXPECT_EQ(again->packed_row, p.packed_row);
    EXPECT_EQ(again->recv_offset, p.recv_offset);
  }
}

TEST(ReferencePlan, RejectsCountsThatDisagreeWithTheLayout) {
  auto all = layouts({{0, 2}, {1, 3}}, 1, 4);
  std::vector<int> counts = {1, 1, 1, 1};
  counts[1] = 0;  // rank 0 claims to send nothing to rank 1
  auto p = plan_dispatch(all[0], counts, 0);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("sends 0 rows to rank 1"), std::string::npos)
      << p.error().message;

  auto not_cumulative = plan_from_prefix(all[0], {1, 1, 0, 2}, 0);
  ASSERT_FALSE(not_cumulative.ok());
  EXPECT_NE(not_cumulative.error().message.find("not cumulative"), std::string::npos);

  auto short_counts = plan_dispatch(all[0], {1, 1}, 0);
  ASSERT_FALSE(short_counts.ok());
}

TEST(ReferencePlan, LocalExpertIds) {
  EXPECT_EQ(to_local_expert(5, 1, 4), 1);
  EXPECT_EQ(to_local_expert(4, 1, 4), 0);
  EXPECT_EQ(to_local_expert(8, 1, 4), -1);
  EXPECT_EQ(to_local_expert(3, 1, 4), -1);
  EXPECT_EQ(to_local_expert(-1, 0, 4), -1);
}

TEST(ReferencePlan, CountsReceivedRowsPerExpertAligned) {
  // 3 rows, top-3, 4 local experts.
  std::vector<std::int64_t> idx = {0,  2,  -1,  //
                                   2,  2,  3,   // expert 2 twice: one row
                                   -1, -1, -1};
  EXPECT_EQ(count_recv_per_expert(idx, 3, 3, 4, 1), (std::vector<int>{1, 0, 2, 1}));
  EXPECT_EQ(count_recv_per_expert(idx, 3, 3, 4, 4), (std::vector<int>{4, 0, 4, 4}));
  EXPECT_EQ(count_recv_per_expert({}, 0, 3, 2, 128), (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace epkit::harness

#endif
