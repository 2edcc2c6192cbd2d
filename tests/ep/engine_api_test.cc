// The engine's host-side rules that need no GPU: value types, config and
// option validation, the heap budget, and the errors a Buffer gives before
// it touches CUDA.
#ifdef EPKIT_WITH_CUDA
#include <epkit/ep.h>
#include <gtest/gtest.h>

namespace epkit::ep {
namespace {

TEST(TensorView, ShapesAndStrides) {
  auto m = TensorView::matrix(nullptr, DType::bf16, 4, 7168);
  EXPECT_EQ(m.strides[0], 7168);
  EXPECT_EQ(m.strides[1], 1);
  EXPECT_TRUE(m.row_major());
  EXPECT_EQ(m.describe(), "bf16[4, 7168]");
  auto c = TensorView::column_major(nullptr, DType::fp32, 4096, 56);
  EXPECT_EQ(c.strides[0], 1);
  EXPECT_EQ(c.strides[1], 4096);
  EXPECT_FALSE(c.row_major());
  auto v = TensorView::vector(nullptr, DType::int32, 8);
  EXPECT_EQ(v.numel(), 8);
  EXPECT_EQ(v.describe(), "int32[8]");
}

TEST(DType, Sizes) {
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::fp8_e4m3), 1u);
  EXPECT_EQ(dtype_size(DType::fp32), 4u);
  EXPECT_EQ(dtype_size(DType::int32), 4u);
  EXPECT_EQ(dtype_size(DType::int64), 8u);
  EXPECT_EQ(dtype_size(DType::boolean), 1u);
}

TEST(Config, Validate) {
  EXPECT_TRUE(Config{}.validate().ok());
  Config c;
  c.num_sms = 0;
  EXPECT_NE(c.validate().error().message.find("num_sms = 0"), std::string::npos);
  c = Config{};
  c.nvl_chunk = 3;
  EXPECT_NE(c.validate().error().message.find("nvl_chunk = 3"), std::string::npos);
  c = Config{};
  c.num_warps = 33;
  EXPECT_FALSE(c.validate().ok());
}

TEST(Buffer, BytesNeededAtDeepEpSizes) {
  BufferOptions o;  // 4096 tokens, hidden 7168, top-8
  std::size_t four = Buffer::bytes_needed(o, 4);
  std::size_t eight = Buffer::bytes_needed(o, 8);
  // Two row regions of ranks * 4096 rows of 14336 bytes dominate.
  EXPECT_GT(four, 2ull * 4 * 4096 * 14336);
  EXPECT_LT(four, 500'000'000ull);
  EXPECT_GT(eight, 2 * four - 10'000'000ull);
  EXPECT_LT(eight, 2'000'000'000ull);  // fits DeepEP's default 2e9 NVL budget
}

class FakeBootstrap final : public Bootstrap {
 public:
  explicit FakeBootstrap(int world) : m_world(world) {}
  int rank() const override { return 0; }
  int world_size() const override { return m_world; }
  Result<std::vector<std::string>> all_gather(const std::string&) override {
    return make_error(ErrorCode::internal, "not reached in these tests");
  }

 private:
  int m_world;
};

TEST(Buffer, RejectsTooManyRanks) {
  FakeBootstrap boot(9);
  auto b = Buffer::create(boot, BufferOptions{});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code, ErrorCode::invalid);
  EXPECT_NE(b.error().message.find("1 to 8 ranks"), std::string::npos);
}

TEST(Buffer, RejectsASmallBudgetNamingBothFigures) {
  FakeBootstrap boot(4);
  BufferOptions o;
  o.num_bytes = 1'000'000;
  auto b = Buffer::create(boot, o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find(std::to_string(Buffer::bytes_needed(o, 4))), std::string::npos);
  EXPECT_NE(b.error().message.find("1000000"), std::string::npos);
}

TEST(Buffer, RejectsBadOptions) {
  FakeBootstrap boot(2);
  BufferOptions o;
  o.max_hidden = 100;  // not a multiple of 128
  EXPECT_FALSE(Buffer::create(boot, o).ok());
  o = BufferOptions{};
  o.max_topk = 0;
  EXPECT_FALSE(Buffer::create(boot, o).ok());
  o = BufferOptions{};
  o.timeout_s = 0;
  EXPECT_FALSE(Buffer::create(boot, o).ok());
}

TEST(LowLatencyOptions, ShrinkIsRefusedByName) {
  FakeBootstrap boot(2);
  BufferOptions o;
  o.enable_shrink = true;
  auto b = Buffer::create(boot, o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code, ErrorCode::invalid);
  EXPECT_NE(b.error().message.find("enable_shrink"), std::string::npos);
}

// Across nodes the mode is offered (on the device-driven leg), up to 64
// ranks: more are refused before any memory is taken.
TEST(LowLatencyOptions, MoreRanksThanTheModeSpansAreRefused) {
  FakeBootstrap boot(72);
  BufferOptions o;
  o.ranks_per_node = 8;
  o.low_latency_bytes = 1 << 20;
  auto b = Buffer::create(boot, o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("spans at most 64 ranks, this Buffer has 72"), std::string::npos)
      << b.error().message;
}

TEST(LowLatencyOptions, TooSmallRegionIsRefused) {
  FakeBootstrap boot(2);
  BufferOptions o;
  o.low_latency_bytes = 100;
  auto b = Buffer::create(boot, o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("low_latency_bytes = 100"), std::string::npos);
}

}  // namespace
}  // namespace epkit::ep
#endif
