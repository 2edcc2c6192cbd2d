// The internode engine's host-side rules that need no GPU: the packed row's
// field offsets (each field aligned in every row), the memory it plans per
// rank, the forwarding Buffer's options, and the errors for node shapes it
// cannot split, the device-driven leg's options and the checks of the count
// messages it delivers.
#ifdef EPKIT_WITH_CUDA
#include <epkit/ep.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ep/internode/buffer.h"
#include "ep/internode/checks.h"

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

TEST(InternodeBuffer, EmulatedNicOutOfRangeIsRefusedByName) {
  BufferOptions o;
  o.ranks_per_node = 1;
  o.network_leg = BufferOptions::NetworkLeg::emulated_nic;
  o.emulated_nic_gbps = 0;
  FixedBootstrap two(0, 2);
  auto r = Buffer::create(two, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("emulated NIC of 0 GB/s"), std::string::npos)
      << r.error().message;
  o.emulated_nic_gbps = 50;
  o.emulated_nic_latency_us = -1;
  r = Buffer::create(two, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("-1 us latency"), std::string::npos) << r.error().message;
  o.emulated_nic_latency_us = 2;
  o.network_leg = static_cast<BufferOptions::NetworkLeg>(7);
  r = Buffer::create(two, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("network_leg = 7"), std::string::npos) << r.error().message;
}

// Count messages as the leg delivers them to node 1 of 3 (one rank a node,
// two local ranks' counts, two experts): rows[n][m] is what node n's bucket
// holds for node m.
struct LegMessages {
  static constexpr int kNodes = 3, kMe = 1, kInts = 16, kSeq = 7;
  const kernels::MessageFormat f{2, 2, kNodes};
  int rows[kNodes][kNodes] = {{5, 3, 2}, {4, 6, 1}, {7, 2, 9}};
  std::vector<std::int32_t> received, sent;

  LegMessages() { build(); }
  void build() {
    received.assign(kNodes * kInts, 0);
    sent.assign(kNodes * kInts, 0);
    for (int n = 0; n < kNodes; ++n) {
      fill(&received[static_cast<std::size_t>(n * kInts)], n, kMe);  // from n, for this node
      fill(&sent[static_cast<std::size_t>(n * kInts)], kMe, n);      // this node's, for n
    }
  }
  void fill(std::int32_t* msg, int from, int to) const {
    msg[0] = msg[kInts - 1] = kSeq;
    msg[f.rows_at()] = rows[from][to];
    msg[f.ranks_at()] = msg[f.ranks_at() + 1] = rows[from][to];
    msg[f.experts_at()] = msg[f.experts_at() + 1] = rows[from][to];
    for (int m = 0; m < kNodes; ++m) msg[f.rows_vector_at() + m] = rows[from][m];
  }
  // The device's read (leg_counts.h), run here; a fault in the words the
  // host gives it.
  Result<kernels::LegCounts> check() const {
    kernels::LegCounts c{};
    const auto fault = kernels::read_leg_counts(received.data(), sent.data(),
                                                kernels::RailPlace{kMe, kNodes, 1, 0}, f, kInts,
                                                kSeq, /*max_tokens=*/16, /*max_topk=*/2, c);
    if (fault.kind != kernels::LegMessageFault::none)
      return invalid(leg_message_error(kernels::unpack_leg_fault(kernels::pack_leg_fault(fault)),
                                       kernels::RailPlace{kMe, kNodes, 1, 0}.global(fault.node)));
    return c;
  }
  std::int32_t& at(int from, int index) {
    return received[static_cast<std::size_t>(from * kInts + index)];
  }
};

TEST(InternodeLegMessages, SegmentsAndWhereThisRanksRowsLand) {
  LegMessages m;
  auto c = m.check();
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto first = [](const std::int32_t* v, int n) { return std::vector<int>(v, v + n); };
  EXPECT_EQ(first(c->rows_from, 3), (std::vector<int>{3, 6, 2}));
  EXPECT_EQ(first(c->segment_begin, 4), (std::vector<int>{0, 3, 9, 11}));
  EXPECT_EQ(first(c->rows_to, 3), (std::vector<int>{4, 6, 1}));
  // At node m, after the rows of node 0 (the only node before this one).
  EXPECT_EQ(first(c->offset_at, 3), (std::vector<int>{5, 3, 2}));
}

TEST(InternodeLegMessages, EveryBadCountNamesItsSender) {
  const kernels::MessageFormat f{2, 2, LegMessages::kNodes};
  struct Case {
    const char* what;
    int from;
    int index;
    std::int32_t value;
    const char* says;
  };
  const Case cases[] = {
      {"stale sequence", 2, 0, 6, "rank 2's count message belongs to another call"},
      {"torn message", 0, LegMessages::kInts - 1, 8, "rank 0's count message belongs"},
      {"rows vector past max_tokens", 2, f.rows_vector_at() + 2, 17, "rank 2 announced 17 rows"},
      {"negative rows", 0, f.rows_vector_at(), -1, "rank 0 announced -1 rows"},
      {"rows disagree with the vector", 2, f.rows_at(), 1, "says 1 rows for node 1, not what"},
      {"local rank past the rows", 0, f.ranks_at() + 1, 4,
       "rank 0 announced 4 tokens for local rank 1"},
      {"expert past rows x top-k", 2, f.experts_at(), 5, "rank 2 announced 5 tokens for expert 0"},
      {"huge negative count", 1, f.experts_at() + 1, -2147483647,
       "-2147483647 tokens for expert 1"},
  };
  for (const Case& c : cases) {
    LegMessages m;
    m.at(c.from, c.index) = c.value;
    auto r = m.check();
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_NE(r.error().message.find(c.says), std::string::npos)
        << c.what << ": " << r.error().message;
  }
}

// Both ends of the leg cut a segment into the same chunks: every row in
// exactly the chunk whose bounds hold it, chunks within one row of each
// other, empty ones only when rows < chunks.
TEST(InternodeLegChunks, EveryRowIsInTheChunkWhoseBoundsHoldIt) {
  for (int chunks = 1; chunks <= 9; ++chunks)
    for (int rows = 1; rows <= 200; ++rows) {
      EXPECT_EQ(kernels::chunk_begin(0, rows, chunks), 0);
      EXPECT_EQ(kernels::chunk_begin(chunks, rows, chunks), rows);
      for (int c = 0; c < chunks; ++c) {
        const int size =
            kernels::chunk_begin(c + 1, rows, chunks) - kernels::chunk_begin(c, rows, chunks);
        EXPECT_TRUE(size == rows / chunks || size == rows / chunks + 1) << rows << " " << chunks;
      }
      for (int j = 0; j < rows; ++j) {
        const int c = kernels::chunk_of(j, rows, chunks);
        ASSERT_TRUE(c >= 0 && c < chunks) << j << " of " << rows;
        EXPECT_LE(kernels::chunk_begin(c, rows, chunks), j);
        EXPECT_LT(j, kernels::chunk_begin(c + 1, rows, chunks));
      }
    }
  // Large counts do not overflow the product.
  EXPECT_EQ(kernels::chunk_of(1 << 30, (1 << 30) + 1, 8), 7);
}

}  // namespace
}  // namespace epkit::ep
#endif
