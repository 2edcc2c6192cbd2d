// The internode engine's host-side rules that need no GPU: the packed row's
// field offsets (each field aligned in every row), the memory it plans per
// rank, the forwarding Buffer's options, and the errors for node shapes it
// cannot split.
#ifdef EPKIT_WITH_CUDA
#include <epkit/ep.h>
#include <gtest/gtest.h>

#include "ep/internode/buffer.h"

namespace epkit::ep {
namespace {

void expect_aligned(const kernels::RowFormat& f) {
  EXPECT_EQ(f.pitch % 16, 0);
  if (f.topk_size > 0) {
    EXPECT_EQ(f.topk_offset % f.topk_size, 0);
  }
  EXPECT_EQ(f.scales_offset % 4, 0);
  EXPECT_EQ(f.weights_offset % 4, 0);
  EXPECT_EQ(f.src_offset % 4, 0);
  EXPECT_LE(f.mask_offset + f.ranks_per_node, f.pitch);
}

TEST(InternodeRow, Bf16WithInt64TopkAndWeights) {
  auto f = row_format(DType::bf16, 7168, 8, 8, true, 8);
  EXPECT_EQ(f.x_bytes, 14336);
  EXPECT_EQ(f.topk_offset, 14336);  // right after x: int64 indices stay 8-byte aligned
  EXPECT_EQ(f.num_scales, 0);
  EXPECT_EQ(f.weights_offset, 14336 + 64);
  EXPECT_EQ(f.src_offset, 14336 + 64 + 32);
  EXPECT_EQ(f.mask_offset, 14336 + 64 + 32 + 4);
  EXPECT_EQ(f.pitch, 14448);
  expect_aligned(f);
}

TEST(InternodeRow, Fp8WithInt32TopkHasScales) {
  auto f = row_format(DType::fp8_e4m3, 7168, 4, 8, true, 8);
  EXPECT_EQ(f.x_bytes, 7168);
  EXPECT_EQ(f.num_scales, 56);
  EXPECT_EQ(f.scales_offset, 7168 + 32);
  expect_aligned(f);
}

TEST(InternodeRow, CachedRowsCarryXAndScalesOnly) {
  auto f = row_format(DType::fp8_e4m3, 2048, 0, 0, false, 2);
  EXPECT_EQ(f.num_topk, 0);
  EXPECT_FALSE(f.with_weights);
  EXPECT_EQ(f.scales_offset, 2048);
  expect_aligned(f);
  // Every hidden a multiple of 128 and every top-k keeps the fields aligned.
  for (int hidden : {128, 2048, 4096, 7168})
    for (int topk : {1, 3, 8, 9})
      for (int width : {0, 4, 8})
        expect_aligned(row_format(DType::bf16, hidden, width, topk, width != 0, 3));
}

TEST(InternodeMemory, GrowsWithTheNodes) {
  BufferOptions o;
  o.max_tokens = 4096;
  o.ranks_per_node = 8;
  auto two = internode_layout(o, 16);
  auto four = internode_layout(o, 32);
  EXPECT_EQ(two.pitch, 14448u);
  EXPECT_GE(two.rows - two.buckets, 2u * 4096u * two.pitch);  // buckets for every node
  EXPECT_GT(four.total, two.total);
  EXPECT_GT(Buffer::bytes_needed(o, 16), Buffer::bytes_needed(BufferOptions{}, 8));
  // The message slot holds the counts of every expert a node can have.
  const kernels::MessageFormat widest{8, 1024 / 2, 2};
  EXPECT_GE(two.message_ints, widest.min_ints());
  EXPECT_EQ(two.message_ints % 4, 0);
}

TEST(InternodeMemory, ForwardingBufferWaitsLongerThanTheNetwork) {
  BufferOptions o;
  o.max_tokens = 1024;
  o.ranks_per_node = 2;
  o.timeout_s = 20;
  o.num_bytes = 123;
  auto f = forwarding_options(o, 8);  // 4 nodes
  EXPECT_EQ(f.max_tokens, 4096);
  EXPECT_EQ(f.ranks_per_node, 0);
  EXPECT_EQ(f.num_bytes, 0u);
  EXPECT_GT(f.timeout_s, o.timeout_s);
}

class FixedBootstrap final : public Bootstrap {
 public:
  FixedBootstrap(int rank, int world) : m_rank(rank), m_world(world) {}
  int rank() const override { return m_rank; }
  int world_size() const override { return m_world; }
  Result<std::vector<std::string>> all_gather(const std::string&) override {
    return make_error(ErrorCode::unavailable, "no peers in this test");
  }

 private:
  int m_rank, m_world;
};

TEST(InternodeBuffer, NodeShapesItCannotSplitAreRefusedByName) {
  BufferOptions o;
  o.ranks_per_node = 3;
  FixedBootstrap four(0, 4);
  auto r = Buffer::create(four, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("ranks_per_node = 3"), std::string::npos) << r.error().message;
  o.ranks_per_node = 9;
  FixedBootstrap eighteen(0, 18);
  r = Buffer::create(eighteen, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("1 to 8 ranks"), std::string::npos) << r.error().message;
  o.ranks_per_node = -1;
  r = Buffer::create(four, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("ranks_per_node = -1"), std::string::npos);
}

}  // namespace
}  // namespace epkit::ep
#endif
