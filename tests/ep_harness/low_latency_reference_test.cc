// The low-latency conformance's host side: DeepEP-style inputs, the FP8 cast
// and its inverse, where each selection must land, and the weighted combine.
#include "ep_harness/low_latency_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "ep_harness/conformance_checks.h"
#include "ep_harness/low_latency_inputs.h"

namespace epkit::harness {
namespace {

namespace ref = low_latency_reference;
namespace cf = conformance;

TEST(LowLatencyReference, Fp8RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(ref::float_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(ref::float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(ref::float_to_e4m3(1.0f), 0x38);
  EXPECT_EQ(ref::float_to_e4m3(-1.0f), 0xb8);
  EXPECT_EQ(ref::float_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(ref::float_to_e4m3(460.0f), 0x7e);
  EXPECT_EQ(ref::float_to_e4m3(1e6f), 0x7e);
  EXPECT_EQ(ref::float_to_e4m3(-1e6f), 0xfe);
  EXPECT_EQ(ref::float_to_e4m3(0x1.0p-9f), 0x01);   // the smallest subnormal
  EXPECT_EQ(ref::float_to_e4m3(0x1.0p-10f), 0x00);  // halfway to 0: even
  EXPECT_EQ(ref::float_to_e4m3(0x1.8p-9f), 0x02);   // halfway 1 and 2: even
  EXPECT_EQ(ref::float_to_e4m3(1.0625f), 0x38);     // halfway 1 and 1.125: even
  EXPECT_EQ(ref::float_to_e4m3(1.1875f), 0x3a);     // halfway 1.125 and 1.25: even
  EXPECT_EQ(ref::float_to_e4m3(0x1.ep-7f), 0x08);   // rounds up into the normals
  // Every finite code maps back to itself.
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN
    const auto code = static_cast<std::uint8_t>(c);
    EXPECT_EQ(ref::float_to_e4m3(cf::fp8_e4m3_to_float(code)), code) << c;
  }
}

TEST(LowLatencyReference, CastOfAConstantGroup) {
  std::vector<std::uint16_t> x(256, cf::float_to_bf16(3.0f));
  for (int i = 128; i < 256; ++i) x[static_cast<std::size_t>(i)] = cf::float_to_bf16(-1.0f);
  std::vector<std::uint8_t> fp8(256);
  float scales[2];
  ref::cast_row(x.data(), 256, false, fp8.data(), scales);
  EXPECT_EQ(scales[0], 3.0f * (1.0f / 448.0f));
  EXPECT_EQ(fp8[0], 0x7e);    // 3 * (448 / 3) rounds to 448
  EXPECT_EQ(fp8[200], 0xfe);  // -448
  std::vector<std::uint16_t> back(256);
  ref::dequantize_row(fp8.data(), scales, 256, back.data());
  EXPECT_EQ(cf::bf16_to_float(back[0]), 3.0f);
  EXPECT_EQ(cf::bf16_to_float(back[255]), -1.0f);
  // round_scale: amax 3 -> scale_inv 2^ceil(log2(3 / 448)) = 2^-7.
  ref::cast_row(x.data(), 256, true, fp8.data(), scales);
  EXPECT_EQ(scales[0], 0x1.0p-7f);
  EXPECT_EQ(scales[1], 0x1.0p-8f);  // amax 1: 1 / 448 -> 2^-8
  EXPECT_EQ(fp8[0], ref::float_to_e4m3(384.0f));
  EXPECT_EQ(ref::ue8m0_of(scales[0]), 127 - 7);
  // An all-zero group keeps a finite scale (amax floor 1e-4).
  std::vector<std::uint16_t> zeros(128, 0);
  ref::cast_row(zeros.data(), 128, false, fp8.data(), scales);
  EXPECT_EQ(scales[0], 1e-4f * (1.0f / 448.0f));
  EXPECT_EQ(fp8[5], 0x00);
}

cf::GatheredRouting tiny_routing() {
  // 2 ranks, 4 experts (2 each), top-2.
  cf::GatheredRouting g;
  g.num_ranks = 2;
  g.num_experts = 4;
  g.num_topk = 2;
  g.num_tokens = {3, 2};
  g.topk_idx = {{2, 0, 3, -1, 2, 3}, {1, 2, -1, 2}};
  g.topk_weights = {std::vector<float>(6, 1.0f), std::vector<float>(4, 1.0f)};
  return g;
}

TEST(LowLatencyReference, ExpectedDispatchOrdersBySourceThenToken) {
  const auto want = ref::expected_dispatch(tiny_routing(), 1, 4);
  EXPECT_EQ(want.local_experts, 2);
  EXPECT_EQ(want.rows_per_expert, 8);
  ASSERT_EQ(want.recv_count, (std::vector<int>{4, 2}));
  // Expert 2: rank 0 tokens 0 and 2, then rank 1 tokens 0 and 1.
  const auto& e2 = want.rows[0];
  ASSERT_EQ(e2.size(), 4u);
  EXPECT_EQ(e2[0].rank, 0);
  EXPECT_EQ(e2[0].token, 0);
  EXPECT_EQ(e2[1].token, 2);
  EXPECT_EQ(e2[1].k, 0);
  EXPECT_EQ(e2[2].rank, 1);
  EXPECT_EQ(e2[3].token, 1);
  EXPECT_EQ(e2[3].k, 1);
  // layout_range: (first << 32) | rows per source.
  EXPECT_EQ(want.layout_range[0], (0ll << 32) | 2);
  EXPECT_EQ(want.layout_range[1], (2ll << 32) | 2);
  EXPECT_EQ(want.layout_range[2], (0ll << 32) | 2);  // expert 3: rank 0 tokens 1, 2
  EXPECT_EQ(want.layout_range[3], (2ll << 32) | 0);
}

TEST(LowLatencyReference, CombineIsAnFmaChainInKOrder) {
  const int hidden = 128;
  std::vector<std::uint16_t> values(2 * hidden, cf::float_to_bf16(1.5f));
  std::vector<std::int64_t> idx = {0, 3, -1, 7};  // token 1: k=0 none, 7 out of range
  std::vector<float> w = {0.25f, 2.0f, 9.0f, 9.0f};
  const auto out = ref::expected_combine(values, idx, w, 2, 2, 4, hidden);
  EXPECT_EQ(cf::bf16_to_float(out[0]), 1.5f * 2.25f);
  EXPECT_EQ(cf::bf16_to_float(out[static_cast<std::size_t>(hidden)]), 0.0f);
}

TEST(LowLatencyReference, DeepEpRankConstantChecks) {
  const int hidden = 256;
  // Rows from source 1 (value 1 - 128) for tokens 3 and 5, then source 0.
  std::vector<float> rows;
  auto add = [&](float v, int token) {
    for (int i = 0; i < hidden; ++i)
      rows.push_back(i < hidden - 128 ? v : static_cast<float>(token));
  };
  add(-128.0f, 2);
  add(-127.0f, 3);
  add(-127.0f, 5);
  const std::vector<int> src = {2, 3, 5};
  const std::vector<std::int64_t> ranges = {(0ll << 32) | 1, (1ll << 32) | 2};
  EXPECT_EQ(ref::deepep_rank_constant_check(rows, hidden, src, ranges, false), std::nullopt);
  EXPECT_EQ(ref::deepep_rank_constant_check(rows, hidden, src, ranges, true), std::nullopt);
  auto bad = rows;
  bad[static_cast<std::size_t>(hidden + 7)] = 0.0f;  // row 1 not constant
  EXPECT_NE(ref::deepep_rank_constant_check(bad, hidden, src, ranges, false), std::nullopt);
  const std::vector<int> wrong_token = {2, 4, 5};
  EXPECT_NE(ref::deepep_rank_constant_check(rows, hidden, wrong_token, ranges, false),
            std::nullopt);
  const std::vector<std::int64_t> swapped = {(0ll << 32) | 2, (2ll << 32) | 1};
  auto v = ref::deepep_rank_constant_check(rows, hidden, src, swapped, false);
  ASSERT_NE(v, std::nullopt);
  EXPECT_NE(v->find("source 0"), std::string::npos) << *v;
}

TEST(LowLatencyReference, DeepEpCombineCheck) {
  const int hidden = 128;
  std::vector<float> x(2 * hidden, 0.5f);
  const std::vector<std::int64_t> idx = {1, -1, 0, 3};
  const std::vector<float> w = {2.0f, 100.0f, 0.5f, 0.25f};
  std::vector<float> combined(2 * hidden);
  for (int i = 0; i < hidden; ++i) {
    combined[static_cast<std::size_t>(i)] = 1.0f;                   // 0.5 * 2
    combined[static_cast<std::size_t>(hidden + i)] = 0.5f * 0.75f;  // both k valid
  }
  EXPECT_EQ(ref::deepep_combine_check(combined, x, idx, w, 2, 4, hidden, 1e-5), std::nullopt);
  combined[3] = 3.0f;
  EXPECT_NE(ref::deepep_combine_check(combined, x, idx, w, 2, 4, hidden, 1e-5), std::nullopt);
  combined[3] = std::nanf("");
  auto nan = ref::deepep_combine_check(combined, x, idx, w, 2, 4, hidden, 1e300);
  ASSERT_NE(nan, std::nullopt);
  EXPECT_NE(nan->find("NaN"), std::string::npos);
}

TEST(LowLatencyInputs, DeepEpStyleAndDeterministic) {
  LowLatencyInputOptions o;
  o.num_tokens = 16;
  o.hidden = 256;
  o.num_topk = 4;
  o.num_experts = 12;
  o.rank = 3;
  o.seed = 7;
  const auto a = make_low_latency_inputs(o);
  const auto b = make_low_latency_inputs(o);
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.topk_idx, b.topk_idx);
  EXPECT_EQ(a.topk_weights, b.topk_weights);
  EXPECT_EQ(cf::bf16_to_float(a.x[0]), 3.0f - k_low_latency_rank_offset);
  EXPECT_EQ(cf::bf16_to_float(a.x[5 * 256 + 255]), 5.0f);  // token index in the last 128
  int masked = 0;
  for (int t = 0; t < 16; ++t) {
    std::set<std::int64_t> seen;
    for (int k = 0; k < 4; ++k) {
      const auto e = a.topk_idx[static_cast<std::size_t>(t * 4 + k)];
      masked += e == -1;
      if (e < 0) continue;
      EXPECT_LT(e, 12);
      EXPECT_TRUE(seen.insert(e).second) << "token " << t << " repeats expert " << e;
    }
  }
  EXPECT_GE(masked, 1);
  EXPECT_LE(masked, 10);
  o.rank = 4;
  EXPECT_NE(make_low_latency_inputs(o).topk_idx, a.topk_idx);
  o.mask_all = true;
  for (auto e : make_low_latency_inputs(o).topk_idx) EXPECT_EQ(e, -1);
  o.mask_all = false;
  o.rank_constant = false;
  const auto r = make_low_latency_inputs(o);
  double sum2 = 0;
  for (auto v : r.x) sum2 += cf::bf16_to_float(v) * cf::bf16_to_float(v);
  EXPECT_NEAR(sum2 / static_cast<double>(r.x.size()), 0.01, 0.003);  // N(0, 0.1^2)
}

}  // namespace
}  // namespace epkit::harness
