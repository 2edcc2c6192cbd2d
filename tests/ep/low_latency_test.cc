// The low-latency mode's host-side rules that need no GPU: the region's
// layout and size hint, the options a Buffer refuses before it touches CUDA,
// the refusals of a Buffer without the mode, the hook's run-once rule and
// rank-3 views.
#ifdef EPKIT_WITH_CUDA
#include <epkit/ep.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "ep/low_latency/region.h"

namespace epkit::ep {
namespace {

namespace k = kernels;

// Every array of both buffers, as (offset, bytes).
std::vector<std::pair<std::int64_t, std::int64_t>> arrays(const k::LowLatencyRegion& r) {
  const std::int64_t rows = r.local_experts * r.rows_per_expert;
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const auto& b : r.buffer) {
    out.emplace_back(b.counts, std::int64_t{r.num_ranks} * r.num_experts * 4);
    out.emplace_back(b.recv_x, rows * r.hidden * 2);
    out.emplace_back(b.recv_scales, rows * r.num_scales * 4);
    out.emplace_back(b.scale_rows, rows * r.num_scales * 4);
    out.emplace_back(b.src_info, rows * 4);
    out.emplace_back(b.src_slot, rows * 4);
    out.emplace_back(b.layout_range, std::int64_t{r.local_experts} * r.num_ranks * 8);
    out.emplace_back(b.recv_count, std::int64_t{r.local_experts} * 4);
    out.emplace_back(b.combine_in, rows * r.hidden * 2);
    out.emplace_back(b.combine_rows,
                     std::int64_t{r.max_tokens} * k::k_low_latency_max_topk * r.hidden * 2);
    out.emplace_back(b.combined, std::int64_t{r.max_tokens} * r.hidden * 2);
    out.emplace_back(b.cast, std::int64_t{r.max_tokens} * r.cast_pitch);
    out.emplace_back(b.stage, rows * r.hidden * 2);
    out.emplace_back(b.slice_meta, std::int64_t{r.num_ranks} * r.meta_pitch);
    out.emplace_back(b.send_meta, std::int64_t{r.num_ranks} * r.meta_pitch);
    out.emplace_back(b.combine_count, std::int64_t{r.num_ranks} * 16);
  }
  return out;
}

TEST(LowLatencyRegion, ArraysAreAlignedDisjointAndAfterTheHeader) {
  for (int ranks : {1, 2, 3, 4, 8, 16, 32}) {
    auto r = low_latency::region_for(128, 7168, ranks, 24 * ranks);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->local_experts, 24);
    EXPECT_EQ(r->rows_per_expert, 128 * ranks);
    EXPECT_EQ(r->num_scales, 56);
    EXPECT_EQ(r->cast_row_bytes % 16, 0);
    // A slice's metadata: its count words and running total, then a token
    // entry per row.
    EXPECT_EQ(r->meta_pitch % 16, 0);
    EXPECT_GE(r->meta_pitch, 8 * 25 + 4 * 24 * 128);
    auto a = arrays(*r);
    std::sort(a.begin(), a.end());
    std::int64_t end = static_cast<std::int64_t>(sizeof(k::LowLatencyHeader));
    for (const auto& [offset, bytes] : a) {
      EXPECT_EQ(offset % 256, 0) << "offset " << offset;
      EXPECT_GE(offset, end) << "arrays overlap at " << offset;
      end = offset + bytes;
    }
    EXPECT_LE(end, r->total);
  }
}

TEST(LowLatencyRegion, CastRowsStayAlignedForSmallHidden) {
  auto r = low_latency::region_for(4, 128, 2, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->cast_row_bytes, 144);  // 128 FP8 bytes + one scale, rounded up to 16
  // A hooked FP8 dispatch copies whole cast rows into staging rows of
  // 2 x hidden bytes.
  for (int hidden : {128, 256, 7168, 65536}) {
    auto big = low_latency::region_for(4, hidden, 2, 2);
    ASSERT_TRUE(big.ok());
    EXPECT_LE(big->cast_row_bytes, 2 * hidden) << hidden;
    // A cast row holds a BF16 row too (the send to another node's source).
    EXPECT_EQ(big->cast_pitch, 2 * hidden);
  }
}

TEST(LowLatencyRegion, RefusesShapesItCannotPlace) {
  auto why = [](int tokens, int hidden, int ranks, int experts) {
    auto r = low_latency::region_for(tokens, hidden, ranks, experts);
    return r.ok() ? std::string() : r.error().message;
  };
  EXPECT_NE(why(0, 7168, 2, 288).find("num_max_dispatch_tokens_per_rank = 0"), std::string::npos);
  EXPECT_NE(why(128, 7000, 2, 288).find("hidden = 7000"), std::string::npos);
  EXPECT_NE(why(128, 7168, 65, 65 * 4).find("65 ranks"), std::string::npos);
  EXPECT_NE(why(128, 7168, 5, 288).find("multiple of the 5 ranks"), std::string::npos);
  EXPECT_NE(why(128, 7168, 2, 2048).find("num_experts = 2048"), std::string::npos);
}

TEST(LowLatencyRegion, SizeHintAtDeepEpDefaults) {
  // 128 tokens per rank, hidden 7168, 288 experts: recv_x, combine_in and
  // the hooked dispatch's staging slices (experts x tokens x hidden x 2
  // bytes each) in each of two buffers.
  const std::size_t two = Buffer::low_latency_size_hint(128, 7168, 2, 288);
  const std::size_t dominant = 2ull * 3 * 288 * 128 * 7168 * 2;
  EXPECT_GT(two, dominant);
  EXPECT_LT(two, dominant + 200'000'000ull);
  // Per-expert rows scale with ranks, experts per rank shrink: about the same.
  const std::size_t eight = Buffer::low_latency_size_hint(128, 7168, 8, 288);
  EXPECT_GT(eight, dominant);
  EXPECT_LT(eight, dominant + 200'000'000ull);
  EXPECT_EQ(Buffer::low_latency_size_hint(128, 7168, 5, 288), 0u);  // 288 % 5 != 0
  // Across nodes nothing grows with the ranks but per-rank words: 2 to 64
  // ranks (8 x A4) within 1 %.
  const std::size_t sixty_four = Buffer::low_latency_size_hint(128, 7168, 64, 64 * 5);
  const std::size_t two_320 = Buffer::low_latency_size_hint(128, 7168, 2, 320);
  EXPECT_LT(sixty_four, two_320 + two_320 / 100);
  EXPECT_GT(sixty_four + sixty_four / 100, two_320);
}

TEST(LowLatencyRegion, BytesNeededCountsTheRegion) {
  BufferOptions o;
  const std::size_t without = Buffer::bytes_needed(o, 2);
  o.low_latency_bytes = Buffer::low_latency_size_hint(128, 7168, 2, 288);
  EXPECT_GE(Buffer::bytes_needed(o, 2), without + o.low_latency_bytes);
}

// A Buffer of another kind (as the internode one): the low-latency calls
// refuse by name instead of doing anything.
class OtherBuffer final : public Buffer {
 public:
  int rank() const override { return 0; }
  int num_ranks() const override { return 2; }
  cudaStream_t comm_stream() const override { return nullptr; }
  Result<Layout> layout(const TensorView&, int, const StreamOrder&, const LayoutOutputs&) override {
    return no();
  }
  Result<DispatchResult> dispatch(const DispatchArgs&) override { return no(); }
  Result<CombineResult> combine(const CombineArgs&) override { return no(); }
  Result<TensorView> combine_input(std::int64_t, std::int64_t) override { return no(); }
  Result<TensorView> combine_weights_input(std::int64_t, std::int64_t) override { return no(); }
  Result<void> barrier() override { return no(); }
  Result<void> synchronize() override { return no(); }

 private:
  static Error no() { return make_error(ErrorCode::internal, "not used"); }
};

TEST(LowLatencyCalls, ABufferWithoutTheModeRefusesEachByName) {
  OtherBuffer b;
  auto d = b.low_latency_dispatch({});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("low_latency_dispatch: this Buffer has no low-latency mode"),
            std::string::npos);
  auto c = b.low_latency_combine({});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("low_latency_combine"), std::string::npos);
  EXPECT_FALSE(b.get_next_low_latency_combine_buffer({}).ok());
  auto clean = b.clean_low_latency_buffer(128, 7168, 288);
  ASSERT_FALSE(clean.ok());
  EXPECT_NE(clean.error().message.find("clean_low_latency_buffer"), std::string::npos);
}

TEST(LowLatencyHook, RunsOnceAndAnEmptyOneSaysSo) {
  int calls = 0;
  LowLatencyHook hook([&]() -> Result<void> {
    ++calls;
    return {};
  });
  ASSERT_TRUE(static_cast<bool>(hook));
  EXPECT_TRUE(hook().ok());
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(static_cast<bool>(hook));
  auto again = hook();
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message.find("already called"), std::string::npos);
  EXPECT_EQ(calls, 1);
  LowLatencyHook none;
  EXPECT_FALSE(none().ok());
}

TEST(TensorView, RankThree) {
  auto t = TensorView::tensor3(nullptr, DType::fp8_e4m3, 36, 1024, 7168);
  EXPECT_EQ(t.numel(), 36ll * 1024 * 7168);
  EXPECT_EQ(t.strides[0], 1024ll * 7168);
  EXPECT_EQ(t.strides[1], 7168);
  EXPECT_EQ(t.rows(), 36);
  EXPECT_EQ(t.cols(), 7168);
  EXPECT_TRUE(t.row_major());
  EXPECT_EQ(t.describe(), "fp8_e4m3[36, 1024, 7168]");
  // DeepEP's column-major scales per expert.
  TensorView s{nullptr, DType::fp32, 3, {36, 1024, 56}, {56 * 1024, 1, 1024}};
  EXPECT_FALSE(s.row_major());
  EXPECT_EQ(s.numel(), 36ll * 1024 * 56);
}

}  // namespace
}  // namespace epkit::ep
#endif
