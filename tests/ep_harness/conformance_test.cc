// The conformance suite's checks on small hand-made arrays: each must pass
// the right answer and reject a wrong one, naming where it differs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "ep_harness/conformance_checks.h"

namespace epkit::harness::conformance {
namespace {

// Two ranks, 4 experts (2 local each), top-2. Rank 0 has 3 tokens, rank 1 two.
GatheredRouting two_ranks() {
  GatheredRouting g;
  g.num_ranks = 2;
  g.num_experts = 4;
  g.num_topk = 2;
  g.num_tokens = {3, 2};
  g.topk_idx = {{0, 3, 1, -1, 2, 3}, {3, -1, 0, 2}};
  g.topk_weights = {{0.5f, 0.25f, 1.0f, 0.0f, 2.0f, 3.0f}, {4.0f, 0.0f, 5.0f, 6.0f}};
  return g;
}

Verdict passes() {
  return std::nullopt;
}

// A part NCCL read before its upload landed (the pageable-copy race the
// gather now orders on NCCL's stream) comes back changed: caught on the
// rank that sent it, before any reference is built from it.
TEST(ConformanceChecks, GatheredOwnPartMustComeBackAsSent) {
  const std::vector<std::uint8_t> mine = {1, 2, 3};
  std::vector<std::uint8_t> all = {9, 9, 9, 1, 2, 3, 7, 7, 7};
  EXPECT_TRUE(gathered_own_part_intact(all.data(), all.size(), mine.data(), 3, 1));
  all[0] = 0;  // another rank's part: not this check's business
  EXPECT_TRUE(gathered_own_part_intact(all.data(), all.size(), mine.data(), 3, 1));
  all[5] = 0;  // the tail of this rank's part still zero
  EXPECT_FALSE(gathered_own_part_intact(all.data(), all.size(), mine.data(), 3, 1));
  EXPECT_FALSE(gathered_own_part_intact(all.data(), all.size(), mine.data(), 3, 3));
  EXPECT_FALSE(gathered_own_part_intact(all.data(), all.size(), mine.data(), 3, -1));
  EXPECT_TRUE(gathered_own_part_intact(all.data(), all.size(), mine.data(), 0, 2));
}

TEST(ConformanceChecks, CalcDiffIsZeroForEqualAndGrowsWithDistance) {
  std::vector<double> x = {0.5, -1.0, 2.0, 3.0};
  EXPECT_EQ(calc_diff(x, x), 0.0);
  std::vector<double> y = {0.5, -1.0, 2.0, 3.001};
  double small = calc_diff(x, y);
  EXPECT_GT(small, 0.0);
  EXPECT_LT(small, 5e-6);
  std::vector<double> z = {0.5, -1.0, 2.0, 4.0};
  EXPECT_GT(calc_diff(x, z), 5e-6);
  // DeepEP's formula by hand: 1 - 2*sum((x+1)(y+1)) / sum((x+1)^2 + (y+1)^2).
  std::vector<double> a = {0.0};
  std::vector<double> b = {1.0};
  EXPECT_NEAR(calc_diff(a, b), 1.0 - 2.0 * 2.0 / (1.0 + 4.0), 1e-15);
}

TEST(ConformanceChecks, NumberFormatsDecode) {
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xc000), -2.0f);
  EXPECT_EQ(float_to_bf16(3.0f), 0x4040);
  // Round to nearest even: 1 + 2^-8 is halfway, goes to 1.0.
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);    // exponent 7, mantissa 0
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);  // the largest finite value
  EXPECT_EQ(fp8_e4m3_to_float(0xb8), -1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7f)));
}

TEST(ConformanceChecks, Fp8RankConstantDequantizesToTheRank) {
  // Rank 3: 448 with scale 3/448 per 128 channels.
  std::vector<std::uint8_t> fp8(256, 0x7e);
  std::vector<float> scales = {3.0f / 448.0f, 3.0f / 448.0f};
  auto v = dequantize_fp8(fp8, scales, 1, 256);
  for (float f : v) ASSERT_EQ(f, 3.0f);
}

TEST(ConformanceChecks, BytesNameTheFirstDifference) {
  std::vector<std::uint8_t> a = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(compare_bytes(a, a, 3), passes());
  auto b = a;
  b[4] = 0xff;
  auto v = compare_bytes(a, b, 3);
  ASSERT_TRUE(v);
  EXPECT_NE(v->find("row 1, byte 1: expected 0x05, got 0xff"), std::string::npos) << *v;
  EXPECT_TRUE(compare_bytes(a, std::vector<std::uint8_t>(5), 3));
  // Prefix: the padded result may carry anything past the received rows.
  std::vector<std::uint8_t> padded = {1, 2, 3, 9, 9, 9};
  EXPECT_EQ(compare_prefix({1, 2, 3}, padded, 3, 1), passes());
  EXPECT_TRUE(compare_prefix({1, 2, 4}, padded, 3, 1));
}

TEST(ConformanceChecks, ExpectedReceiveFollowsSourceThenTokenOrder) {
  auto e = expected_recv(two_ranks(), 1);
  // Rank 1 holds experts 2 and 3: rank 0's tokens 0 (expert 3) and 2 (2, 3),
  // then rank 1's tokens 0 (3) and 1 (2).
  EXPECT_EQ(e.num_recv, 4);
  EXPECT_EQ(e.src_idx, (std::vector<int>{0, 2, 0, 1}));
  EXPECT_EQ(e.src_rank, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(e.topk_idx, (std::vector<std::int64_t>{-1, 1, 0, 1, 1, -1, -1, 0}));
  EXPECT_EQ(e.topk_weights, (std::vector<float>{0, 0.25f, 2.0f, 3.0f, 4.0f, 0, 0, 6.0f}));
  EXPECT_EQ(e.tokens_per_expert, (std::vector<int>{2, 3}));
  // (i, j): rows rank j gets from ranks 0..i.
  EXPECT_EQ(e.rank_prefix_matrix, (std::vector<int>{2, 2, 3, 4}));
  EXPECT_EQ(e.token_reach, (std::vector<int>{1, 2}));
  auto e0 = expected_recv(two_ranks(), 0);
  EXPECT_EQ(e0.token_reach, (std::vector<int>{2, 1, 1}));
}

TEST(ConformanceChecks, RankConstantRows) {
  // Rank 1 got 2 rows from rank 0 and 1 from rank 1: prefix column 1 = {2, 3}.
  std::vector<int> prefix = {1, 2, 1, 3};
  std::vector<float> good = {0, 0, 0, 0, 1, 1};
  EXPECT_EQ(check_rank_constant_rows(good, 3, 2, prefix, 2, 1), passes());
  auto bad = good;
  bad[3] = 1;  // row 1 claims rank 1 inside rank 0's segment
  auto v = check_rank_constant_rows(bad, 3, 2, prefix, 2, 1);
  ASSERT_TRUE(v);
  EXPECT_NE(v->find("row 1"), std::string::npos) << *v;
  // Segments that do not end at the row count are rejected too.
  EXPECT_TRUE(check_rank_constant_rows(good, 3, 2, {1, 2, 1, 4}, 2, 1));
}

TEST(ConformanceChecks, ExpertListIsAligned) {
  EXPECT_EQ(check_expert_list({128, 0, 256}, {5, 0, 129}, 128), passes());
  EXPECT_EQ(check_expert_list({5, 0, 129}, {5, 0, 129}, 1), passes());
  EXPECT_TRUE(check_expert_list({5, 0, 129}, {5, 0, 129}, 128));
  EXPECT_TRUE(check_expert_list({128, 0}, {5, 0, 129}, 128));
}

TEST(ConformanceChecks, RecvTopkIdxRangeAndCounts) {
  std::vector<std::int64_t> idx = {0, -1, 1, 1, -1, 0};
  EXPECT_EQ(check_recv_topk_idx(idx, 2, 2, {2, 2}), passes());
  EXPECT_TRUE(check_recv_topk_idx(idx, 2, 2, {2, 1}));  // count differs
  auto out = idx;
  out[1] = 2;  // not a local expert
  auto v = check_recv_topk_idx(out, 2, 2, {2, 3});
  ASSERT_TRUE(v);
  EXPECT_NE(v->find("row 0, column 1"), std::string::npos) << *v;
  out[1] = -2;
  EXPECT_TRUE(check_recv_topk_idx(out, 2, 2, {2, 2}));
}

TEST(ConformanceChecks, RankConstantWeightsFillMaskedSlotsWithTheRowMax) {
  std::vector<int> prefix = {1, 1, 2, 2};  // rank 0 got one row from each rank
  std::vector<std::int64_t> idx = {0, -1, -1, 1};
  std::vector<float> w = {0, 0, 0, 1};
  EXPECT_EQ(check_rank_constant_weights(w, idx, 2, prefix, 2, 0), passes());
  auto bad = w;
  bad[3] = 0.5f;
  EXPECT_TRUE(check_rank_constant_weights(bad, idx, 2, prefix, 2, 0));
}

TEST(ConformanceChecks, PaddingMustBeMinusOne) {
  std::vector<std::int64_t> idx = {0, 1, -1, -1, -1, -1};
  EXPECT_EQ(check_padding(idx, 2, 1), passes());
  idx[5] = 0;
  auto v = check_padding(idx, 2, 1);
  ASSERT_TRUE(v);
  EXPECT_NE(v->find("row 2, column 1"), std::string::npos) << *v;
}

TEST(ConformanceChecks, CombinedRankConstantIsExact) {
  // Rank 2, hidden 2: token 0 reached 3 ranks, token 1 none.
  EXPECT_EQ(check_combined_exact({6, 6, 0, 0}, 2, 2, {3, 0}), passes());
  EXPECT_TRUE(check_combined_exact({6, 6, 0, 2}, 2, 2, {3, 0}));
  EXPECT_TRUE(check_combined_exact({6, 6, 0}, 2, 2, {3, 0}));
}

TEST(ConformanceChecks, CombinedRandomIsCloseAfterDividing) {
  std::vector<float> x = {0.5f, -1.25f, 2.0f, 0.75f};
  std::vector<float> combined = {1.0f, -2.5f, 0.0f, 0.0f};  // token 0 twice, token 1 nowhere
  EXPECT_EQ(check_combined_close(combined, x, 2, {2, 0}, 5e-6), passes());
  auto off = combined;
  off[1] = -2.0f;
  EXPECT_TRUE(check_combined_close(off, x, 2, {2, 0}, 5e-6));
  auto leak = combined;
  leak[2] = 1.0f;  // a token that went nowhere must combine to 0
  EXPECT_TRUE(check_combined_close(leak, x, 2, {2, 0}, 5e-6));
}

TEST(ConformanceChecks, CombinedWeightsIgnoreMaskedSlots) {
  std::vector<std::int64_t> idx = {3, -1, 0, 1};
  std::vector<float> w = {0.5f, 0.7f, 0.25f, 0.125f};
  std::vector<float> combined = {0.5f, 0.0f, 0.25f, 0.125f};
  EXPECT_EQ(check_combined_weights(combined, w, idx, 1e-9), passes());
  combined[2] = 0.26f;
  EXPECT_TRUE(check_combined_weights(combined, w, idx, 1e-9));
}

TEST(ConformanceChecks, IntegerListsAndIndexWidths) {
  EXPECT_EQ(compare_ints(std::vector<int>{1, 2}, std::vector<int>{1, 2}), passes());
  auto v = compare_ints(std::vector<int>{1, 2}, std::vector<int>{1, 3});
  ASSERT_TRUE(v);
  EXPECT_NE(v->find("index 1: expected 2, got 3"), std::string::npos) << *v;
  std::int32_t narrow[] = {-1, 7};
  std::vector<std::uint8_t> bytes(sizeof(narrow));
  std::memcpy(bytes.data(), narrow, sizeof(narrow));
  EXPECT_EQ(decode_index(bytes, 4), (std::vector<std::int64_t>{-1, 7}));
}

}  // namespace
}  // namespace epkit::harness::conformance
