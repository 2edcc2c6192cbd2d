// The engine's argument refusals, one test per message: the check functions
// the launchers call (src/ep/{intranode,internode,low_latency}/checks.h), fed
// crafted arguments on the CPU. Each test starts from arguments the checks
// accept and breaks one thing, so a refusal that goes missing (or starts
// refusing good calls) shows here, not on a GPU.
#ifdef EPKIT_WITH_CUDA
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "ep/internode/checks.h"
#include "ep/intranode/checks.h"
#include "ep/low_latency/checks.h"

namespace epkit::ep {
namespace {

// Nothing is read through these: the checks look at shapes and addresses.
void* const k_mem = reinterpret_cast<void*>(std::uintptr_t{1} << 20);
void* const k_odd = reinterpret_cast<void*>((std::uintptr_t{1} << 20) + 8);

template <typename T>
std::string refusal(const Result<T>& r) {
  if (r) return "(accepted)";
  EXPECT_EQ(r.error().code, ErrorCode::invalid) << r.error().message;
  return r.error().message;
}

// ---- intranode: options ---------------------------------------------------

BufferOptions small_options() {
  BufferOptions o;
  o.max_tokens = 64;
  o.max_hidden = 256;
  o.max_topk = 8;
  return o;
}

TEST(IntranodeOptionChecks, AcceptsTheDefaults) {
  EXPECT_EQ(refusal(check_buffer_options(BufferOptions{}, 8)), "(accepted)");
}

TEST(IntranodeOptionChecks, Ranks) {
  EXPECT_EQ(refusal(check_buffer_options(BufferOptions{}, 9)),
            "a Buffer spans 1 to 8 ranks of one node, not 9");
}

TEST(IntranodeOptionChecks, TokensAndHidden) {
  BufferOptions o;
  o.max_hidden = 100;
  EXPECT_EQ(refusal(check_buffer_options(o, 2)),
            "BufferOptions: max_tokens 4096 must be >= 0 and max_hidden 100 a positive multiple "
            "of 128");
}

TEST(IntranodeOptionChecks, TopK) {
  BufferOptions o;
  o.max_topk = 33;
  EXPECT_EQ(refusal(check_buffer_options(o, 2)), "BufferOptions.max_topk = 33: must be 1..32");
}

TEST(IntranodeOptionChecks, Timeout) {
  BufferOptions o;
  o.timeout_s = 0;
  EXPECT_EQ(refusal(check_buffer_options(o, 2)), "BufferOptions.timeout_s must be positive");
}

TEST(IntranodeOptionChecks, LowLatencyBytes) {
  BufferOptions o;
  o.low_latency_bytes = 1;
  EXPECT_EQ(refusal(check_buffer_options(o, 2)),
            fmt::format("BufferOptions.low_latency_bytes = 1: at least {} "
                        "(Buffer::low_latency_size_hint gives what a shape needs), or 0 for no "
                        "low-latency region",
                        sizeof(kernels::LowLatencyHeader)));
}

TEST(IntranodeOptionChecks, NumBytes) {
  BufferOptions o = small_options();
  o.num_bytes = 1000;
  EXPECT_EQ(refusal(check_buffer_options(o, 2)),
            fmt::format("the Buffer needs {} bytes per GPU for 2 ranks x 64 tokens x hidden 256 "
                        "(top-8), but num_bytes allows 1000",
                        heap_layout(o, 2).total));
}

TEST(IntranodeOptionChecks, OutputArenaBytes) {
  BufferOptions o = small_options();
  o.output_arena_bytes = (std::size_t{1} << 40) + 1;
  EXPECT_EQ(
      refusal(check_buffer_options(o, 2)),
      fmt::format("BufferOptions.output_arena_bytes = {}: at most 1 TiB", o.output_arena_bytes));
  // The arena comes last, on a 2 MiB boundary, on top of num_bytes.
  o.output_arena_bytes = std::size_t{3} << 20;
  const HeapLayout h = heap_layout(o, 2);
  EXPECT_EQ(h.arena % (std::size_t{2} << 20), 0u);
  EXPECT_GE(h.arena, h.core);
  EXPECT_EQ(h.total, h.arena + h.arena_bytes);
  o.num_bytes = h.core;
  EXPECT_TRUE(check_buffer_options(o, 2));
  BufferOptions none = small_options();
  EXPECT_EQ(heap_layout(none, 2).total, heap_layout(none, 2).core);
  EXPECT_EQ(heap_layout(none, 2).arena_bytes, 0u);
}

// ---- intranode: layout ----------------------------------------------------

TEST(LayoutChecks, Accepts) {
  auto p = layout_params(TensorView::matrix(k_mem, DType::int64, 16, 4), 8, 4, 64);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->num_tokens, 16);
  EXPECT_EQ(p->num_topk, 4);
}

TEST(LayoutChecks, Missing) {
  EXPECT_EQ(refusal(layout_params(TensorView::matrix(nullptr, DType::int64, 16, 4), 8, 4, 64)),
            "layout: topk_idx is missing");
}

TEST(LayoutChecks, DType) {
  EXPECT_EQ(refusal(layout_params(TensorView::matrix(k_mem, DType::fp32, 16, 4), 8, 4, 64)),
            "layout: topk_idx (fp32[16, 4]) must be a row-major int64 or int32 matrix");
}

TEST(LayoutChecks, Tokens) {
  EXPECT_EQ(refusal(layout_params(TensorView::matrix(k_mem, DType::int64, 65, 4), 8, 4, 64)),
            "layout: 65 tokens, the Buffer was made for at most 64");
}

TEST(LayoutChecks, TopK) {
  EXPECT_EQ(refusal(layout_params(TensorView::matrix(k_mem, DType::int32, 16, 33), 8, 4, 64)),
            "layout: top-k is at most 32");
}

TEST(LayoutChecks, Experts) {
  EXPECT_EQ(refusal(layout_params(TensorView::matrix(k_mem, DType::int64, 16, 4), 6, 4, 64)),
            "layout: 6 experts must be 1..1024 and a multiple of the 4 ranks");
}

// ---- intranode: dispatch --------------------------------------------------

constexpr int k_ranks = 4;

DispatchArgs good_dispatch() {
  DispatchArgs a;
  a.x = TensorView::matrix(k_mem, DType::bf16, 16, 256);
  a.topk_idx = TensorView::matrix(k_mem, DType::int64, 16, 4);
  a.topk_weights = TensorView::matrix(k_mem, DType::fp32, 16, 4);
  a.num_tokens_per_rank = TensorView::vector(k_mem, DType::int32, k_ranks);
  a.is_token_in_rank = TensorView::matrix(k_mem, DType::boolean, 16, k_ranks);
  a.num_tokens_per_expert = TensorView::vector(k_mem, DType::int32, 8);
  return a;
}

std::string dispatch_refusal(const DispatchArgs& a) {
  return refusal(check_dispatch(a, k_ranks, small_options()));
}

std::shared_ptr<DispatchHandle> handle_for(int tokens, int ranks) {
  auto h = std::make_shared<DispatchHandle>();
  h->num_tokens = tokens;
  h->num_ranks = ranks;
  h->num_recv_tokens = 16;
  return h;
}

TEST(DispatchChecks, AcceptsGoodArguments) {
  EXPECT_EQ(dispatch_refusal(good_dispatch()), "(accepted)");
  DispatchArgs a = good_dispatch();
  a.x = TensorView::matrix(k_mem, DType::fp8_e4m3, 16, 256);
  a.x_scales = TensorView::matrix(k_mem, DType::fp32, 16, 2);
  EXPECT_EQ(dispatch_refusal(a), "(accepted)");
  DispatchArgs cached;
  cached.x = good_dispatch().x;
  cached.handle = handle_for(16, k_ranks);
  EXPECT_EQ(dispatch_refusal(cached), "(accepted)");
}

TEST(DispatchChecks, Config) {
  DispatchArgs a = good_dispatch();
  a.config.num_sms = 0;
  EXPECT_NE(dispatch_refusal(a).find("num_sms = 0"), std::string::npos);
}

TEST(DispatchChecks, XDType) {
  DispatchArgs a = good_dispatch();
  a.x.dtype = DType::fp32;
  EXPECT_EQ(dispatch_refusal(a), "dispatch: x is fp32[16, 256], expected bf16 or fp8_e4m3");
}

// check_rows (src/ep/intranode/buffer.cc), reached through dispatch's x and combine's x.
TEST(DispatchChecks, XMissing) {
  DispatchArgs a = good_dispatch();
  a.x = TensorView{};
  EXPECT_EQ(dispatch_refusal(a), "dispatch: x is missing");
}

TEST(DispatchChecks, XRowsWithoutMemory) {
  DispatchArgs a = good_dispatch();
  a.x.data = nullptr;
  EXPECT_EQ(dispatch_refusal(a), "dispatch: x has rows but no memory");
}

TEST(DispatchChecks, XNotRowMajor) {
  DispatchArgs a = good_dispatch();
  a.x = TensorView::column_major(k_mem, DType::bf16, 16, 256);
  EXPECT_EQ(dispatch_refusal(a),
            "dispatch: x (bf16[16, 256]) must be a row-major matrix (strides 1, 16)");
}

TEST(DispatchChecks, XUnaligned) {
  DispatchArgs a = good_dispatch();
  a.x.data = k_odd;
  EXPECT_EQ(dispatch_refusal(a), "dispatch: x rows must start on 16-byte boundaries");
}

TEST(DispatchChecks, XTooLarge) {
  DispatchArgs a = good_dispatch();
  a.x = TensorView::matrix(k_mem, DType::bf16, 65, 256);
  EXPECT_EQ(dispatch_refusal(a),
            "dispatch: x is bf16[65, 256], the Buffer was made for at most 64 tokens of hidden "
            "256");
}

TEST(DispatchChecks, RowBytes) {
  DispatchArgs a = good_dispatch();
  a.x = TensorView::matrix(k_mem, DType::fp8_e4m3, 16, 200);
  a.x.strides[0] = 208;
  EXPECT_EQ(dispatch_refusal(a),
            "dispatch: rows of fp8_e4m3[16, 200] are not a multiple of 16 bytes");
}

TEST(DispatchChecks, Fp8Hidden) {
  DispatchArgs a = good_dispatch();
  a.x = TensorView::matrix(k_mem, DType::fp8_e4m3, 16, 144);
  EXPECT_EQ(dispatch_refusal(a), "dispatch: FP8 hidden 144 must be a multiple of 128");
}

TEST(DispatchChecks, Fp8Scales) {
  DispatchArgs a = good_dispatch();
  a.x = TensorView::matrix(k_mem, DType::fp8_e4m3, 16, 256);
  EXPECT_EQ(dispatch_refusal(a), "dispatch: FP8 x needs x_scales fp32[16, 2], got none");
  a.x_scales = TensorView::matrix(k_mem, DType::fp32, 16, 3);
  EXPECT_EQ(dispatch_refusal(a), "dispatch: FP8 x needs x_scales fp32[16, 2], got fp32[16, 3]");
}

TEST(DispatchChecks, ScalesWithBf16) {
  DispatchArgs a = good_dispatch();
  a.x_scales = TensorView::matrix(k_mem, DType::fp32, 16, 2);
  EXPECT_EQ(dispatch_refusal(a),
            "dispatch: x_scales given with a BF16 x (scales go with FP8 only)");
}

TEST(DispatchChecks, NumWorstTokens) {
  DispatchArgs a = good_dispatch();
  a.num_worst_tokens = 257;
  EXPECT_EQ(dispatch_refusal(a), "dispatch: num_worst_tokens 257 must be 0..256");
}

TEST(DispatchChecks, ExpertAlignment) {
  DispatchArgs a = good_dispatch();
  a.expert_alignment = 0;
  EXPECT_EQ(dispatch_refusal(a), "dispatch: expert_alignment must be >= 1");
}

TEST(DispatchChecks, CachedHandleShape) {
  DispatchArgs a;
  a.x = good_dispatch().x;
  a.handle = handle_for(12, k_ranks);
  EXPECT_EQ(dispatch_refusal(a),
            "cached dispatch: the handle is for 12 tokens over 4 ranks, x has 16 tokens over 4");
}

TEST(DispatchChecks, CachedWithTopK) {
  DispatchArgs a = good_dispatch();
  a.handle = handle_for(16, k_ranks);
  EXPECT_EQ(dispatch_refusal(a),
            "cached dispatch: pass x (and x_scales) only; top-k goes with the first dispatch");
}

TEST(DispatchChecks, TopKIdx) {
  DispatchArgs a = good_dispatch();
  a.topk_idx = TensorView::matrix(k_mem, DType::int64, 16, 9);
  EXPECT_EQ(dispatch_refusal(a),
            "dispatch: topk_idx (int64[16, 9]) must be a row-major int64/int32 [16, 1..8]");
}

TEST(DispatchChecks, WeightsWithoutTopK) {
  DispatchArgs a = good_dispatch();
  a.topk_idx = TensorView{};
  EXPECT_EQ(dispatch_refusal(a), "dispatch: topk_weights given without topk_idx");
}

TEST(DispatchChecks, Weights) {
  DispatchArgs a = good_dispatch();
  a.topk_weights = TensorView::matrix(k_mem, DType::fp32, 16, 3);
  EXPECT_EQ(dispatch_refusal(a),
            "dispatch: topk_weights (fp32[16, 3]) must be row-major fp32 [16, 4]");
}

TEST(DispatchChecks, TokensPerRank) {
  DispatchArgs a = good_dispatch();
  a.num_tokens_per_rank = TensorView::vector(k_mem, DType::int32, 3);
  EXPECT_EQ(dispatch_refusal(a), "dispatch: num_tokens_per_rank must be int32[4] (from layout())");
  // A forwarding dispatch has its counts per segment instead.
  EXPECT_EQ(refusal(check_dispatch(a, k_ranks, small_options(), 8)), "(accepted)");
}

TEST(DispatchChecks, TokenInRank) {
  DispatchArgs a = good_dispatch();
  a.is_token_in_rank = TensorView::matrix(k_mem, DType::boolean, 16, 3);
  EXPECT_EQ(dispatch_refusal(a),
            "dispatch: is_token_in_rank must be a row-major bool[16, 4] (from layout())");
}

TEST(DispatchChecks, TokensPerExpert) {
  DispatchArgs a = good_dispatch();
  a.num_tokens_per_expert = TensorView::vector(k_mem, DType::int32, 6);
  EXPECT_EQ(dispatch_refusal(a),
            "dispatch: num_tokens_per_expert must be int32[experts], experts a multiple of 4 up "
            "to 1024");
  EXPECT_EQ(refusal(check_dispatch(good_dispatch(), k_ranks, small_options(), 6)),
            "dispatch: num_tokens_per_expert must be int32[experts], experts a multiple of 4 up "
            "to 1024");
}

// ---- intranode: combine ---------------------------------------------------

CombineArgs good_combine() {
  CombineArgs a;
  a.x = TensorView::matrix(k_mem, DType::bf16, 16, 256);
  a.topk_weights = TensorView::matrix(k_mem, DType::fp32, 16, 4);
  a.handle = handle_for(16, k_ranks);
  return a;
}

std::string combine_refusal(const CombineArgs& a) {
  return refusal(check_combine(a, k_ranks, small_options()));
}

TEST(CombineChecks, AcceptsGoodArguments) {
  EXPECT_EQ(combine_refusal(good_combine()), "(accepted)");
}

TEST(CombineChecks, Config) {
  CombineArgs a = good_combine();
  a.config.nvl_chunk = 3;
  EXPECT_NE(combine_refusal(a).find("nvl_chunk = 3"), std::string::npos);
}

TEST(CombineChecks, HandleMissing) {
  CombineArgs a = good_combine();
  a.handle = nullptr;
  EXPECT_EQ(combine_refusal(a), "combine: the dispatch handle is missing");
}

TEST(CombineChecks, HandleOfAnotherSize) {
  CombineArgs a = good_combine();
  a.handle = handle_for(16, 2);
  EXPECT_EQ(combine_refusal(a), "combine: the handle comes from a Buffer of another size");
}

TEST(CombineChecks, Bias) {
  CombineArgs a = good_combine();
  a.bias[0] = TensorView::matrix(k_mem, DType::bf16, 16, 256);
  a.bias[1] = TensorView::matrix(k_mem, DType::bf16, 16, 256);
  EXPECT_EQ(combine_refusal(a), "(accepted)");
  a.bias[1] = TensorView::matrix(k_odd, DType::bf16, 16, 256);
  EXPECT_EQ(combine_refusal(a),
            "combine: bias 1 (bf16[16, 256]) must be a row-major bf16[16, 256] with 16-byte "
            "aligned rows");
}

TEST(CombineChecks, CallerOutputs) {
  CombineArgs a = good_combine();
  a.out_x = TensorView::matrix(k_mem, DType::bf16, 16, 256);
  a.out_topk_weights = TensorView::matrix(k_mem, DType::fp32, 16, 4);
  EXPECT_EQ(combine_refusal(a), "(accepted)");
  a.out_x = TensorView::matrix(k_mem, DType::bf16, 15, 256);
  EXPECT_EQ(combine_refusal(a),
            "combine: out_x (bf16[15, 256]) must be a contiguous bf16[16, 256], 16-byte aligned");
  a.out_x = {};
  a.out_topk_weights = TensorView::matrix(k_mem, DType::fp32, 16, 8);
  EXPECT_EQ(combine_refusal(a),
            "combine: out_topk_weights (fp32[16, 8]) must be a contiguous fp32[16, 4]");
  a.topk_weights = {};
  a.out_topk_weights = TensorView::matrix(k_mem, DType::fp32, 16, 4);
  EXPECT_EQ(combine_refusal(a), "combine: out_topk_weights given without topk_weights to combine");
}

TEST(LayoutChecks, CallerOutputs) {
  const TensorView topk = TensorView::matrix(k_mem, DType::int64, 16, 6);
  LayoutOutputs into;
  into.num_tokens_per_rank = TensorView::vector(k_mem, DType::int32, 4);
  into.num_tokens_per_expert = TensorView::vector(k_mem, DType::int32, 8);
  into.is_token_in_rank = TensorView::matrix(k_mem, DType::boolean, 16, 4);
  EXPECT_EQ(refusal(check_layout_outputs(into, topk, 4, 8, 1)), "(accepted)");
  into.is_token_in_rank = TensorView::matrix(k_mem, DType::boolean, 16, 5);
  EXPECT_EQ(refusal(check_layout_outputs(into, topk, 4, 8, 1)),
            "layout: is_token_in_rank (bool[16, 5]) must be a contiguous bool[16, 4]");
  into.is_token_in_rank = {};
  into.num_tokens_per_expert = TensorView::vector(k_mem, DType::int64, 8);
  EXPECT_EQ(refusal(check_layout_outputs(into, topk, 4, 8, 1)),
            "layout: num_tokens_per_expert (int64[8]) must be a contiguous int32[8]");
  into.num_tokens_per_expert = {};
  into.num_tokens_per_rdma_rank = TensorView::vector(k_mem, DType::int32, 2);
  EXPECT_EQ(refusal(check_layout_outputs(into, topk, 4, 8, 1)),
            "layout: num_tokens_per_rdma_rank is for internode Buffers only");
  EXPECT_EQ(refusal(check_layout_outputs(into, topk, 4, 8, 2)), "(accepted)");
  // The copy of topk_idx (ElasticBuffer's handle copy): topk_idx's dtype and shape.
  into.topk_idx_copy = TensorView::matrix(k_mem, DType::int64, 16, 6);
  EXPECT_EQ(refusal(check_layout_outputs(into, topk, 4, 8, 2)), "(accepted)");
  into.topk_idx_copy = TensorView::matrix(k_mem, DType::int32, 16, 6);
  EXPECT_EQ(refusal(check_layout_outputs(into, topk, 4, 8, 2)),
            "layout: topk_idx_copy (int32[16, 6]) must be a contiguous int64[16, 6]");
}

TEST(CombineChecks, XDType) {
  CombineArgs a = good_combine();
  a.x.dtype = DType::fp32;
  EXPECT_EQ(combine_refusal(a), "combine: x is fp32[16, 256], expected bf16");
}

TEST(CombineChecks, XShape) {
  CombineArgs a = good_combine();
  a.x = TensorView::matrix(k_mem, DType::bf16, 15, 256);
  EXPECT_EQ(combine_refusal(a),
            "combine: x is bf16[15, 256], expected bf16[16, hidden] with hidden a multiple of 8 "
            "up to 256");
}

TEST(CombineChecks, Weights) {
  CombineArgs a = good_combine();
  a.topk_weights = TensorView::matrix(k_mem, DType::fp32, 16, 9);
  EXPECT_EQ(combine_refusal(a),
            "combine: topk_weights (fp32[16, 9]) must be row-major fp32 [16, 1..8]");
}

// ---- internode ------------------------------------------------------------

constexpr int k_world = 16;  // two nodes of eight

BufferOptions internode_options() {
  BufferOptions o = small_options();
  o.ranks_per_node = 8;
  return o;
}

TEST(InternodeOptionChecks, AcceptsTwoNodes) {
  EXPECT_EQ(refusal(check_internode_options(internode_options(), k_world)), "(accepted)");
}

TEST(InternodeOptionChecks, RanksPerNode) {
  BufferOptions o = internode_options();
  o.ranks_per_node = 3;
  EXPECT_EQ(refusal(check_internode_options(o, k_world)),
            "BufferOptions.ranks_per_node = 3: 16 ranks must split into 2 to 32 nodes of 1 to 8 "
            "ranks");
}

TEST(InternodeOptionChecks, Timeout) {
  BufferOptions o = internode_options();
  o.timeout_s = -1;
  EXPECT_EQ(refusal(check_internode_options(o, k_world)),
            "BufferOptions.timeout_s must be positive");
}

TEST(InternodeOptionChecks, NumBytes) {
  BufferOptions o = internode_options();
  o.num_bytes = 1000;
  const std::string message = refusal(check_internode_options(o, k_world));
  EXPECT_EQ(message.rfind("the Buffer needs ", 0), 0u) << message;
  EXPECT_NE(message.find(" bytes per GPU for 2 nodes x 8 ranks x 64 tokens x hidden 256 (top-8), "
                         "but num_bytes allows 1000"),
            std::string::npos)
      << message;
}

DispatchArgs good_internode_dispatch() {
  DispatchArgs a;
  a.x = TensorView::matrix(k_mem, DType::bf16, 16, 256);
  a.topk_idx = TensorView::matrix(k_mem, DType::int64, 16, 4);
  a.topk_weights = TensorView::matrix(k_mem, DType::fp32, 16, 4);
  a.num_tokens_per_rank = TensorView::vector(k_mem, DType::int32, k_world);
  a.is_token_in_rank = TensorView::matrix(k_mem, DType::boolean, 16, k_world);
  a.num_tokens_per_expert = TensorView::vector(k_mem, DType::int32, 32);
  return a;
}

std::string internode_refusal(const DispatchArgs& a) {
  return refusal(check_internode_dispatch(a, k_world, internode_options()));
}

std::shared_ptr<InternodeHandle> internode_handle(int tokens) {
  auto h = std::make_shared<InternodeHandle>(nullptr, nullptr);
  h->num_tokens = tokens;
  h->num_ranks = k_world;
  return h;
}

TEST(InternodeDispatchChecks, AcceptsGoodArguments) {
  EXPECT_EQ(internode_refusal(good_internode_dispatch()), "(accepted)");
  DispatchArgs cached;
  cached.x = good_internode_dispatch().x;
  cached.handle = internode_handle(16);
  EXPECT_EQ(internode_refusal(cached), "(accepted)");
}

TEST(InternodeDispatchChecks, XDType) {
  DispatchArgs a = good_internode_dispatch();
  a.x.dtype = DType::int32;
  EXPECT_EQ(internode_refusal(a), "dispatch: x is int32[16, 256], expected bf16 or fp8_e4m3");
}

TEST(InternodeDispatchChecks, XTooLarge) {
  DispatchArgs a = good_internode_dispatch();
  a.x = TensorView::matrix(k_mem, DType::bf16, 16, 384);
  EXPECT_EQ(internode_refusal(a),
            "dispatch: x is bf16[16, 384], the Buffer was made for at most 64 tokens of hidden "
            "256");
}

TEST(InternodeDispatchChecks, Fp8Scales) {
  DispatchArgs a = good_internode_dispatch();
  a.x = TensorView::matrix(k_mem, DType::fp8_e4m3, 16, 256);
  EXPECT_EQ(internode_refusal(a),
            "dispatch: FP8 x fp8_e4m3[16, 256] needs x_scales fp32[16, 2], got none");
}

TEST(InternodeDispatchChecks, CachedForeignHandle) {
  DispatchArgs a;
  a.x = good_internode_dispatch().x;
  a.handle = handle_for(16, k_world);  // an intranode handle
  EXPECT_EQ(internode_refusal(a), "cached dispatch: the handle is not from this internode Buffer");
}

TEST(InternodeDispatchChecks, CachedTokens) {
  DispatchArgs a;
  a.x = good_internode_dispatch().x;
  a.handle = internode_handle(12);
  EXPECT_EQ(internode_refusal(a), "cached dispatch: the handle is for 12 tokens, x has 16");
}

TEST(InternodeDispatchChecks, CachedWithTopK) {
  DispatchArgs a = good_internode_dispatch();
  a.handle = internode_handle(16);
  EXPECT_EQ(internode_refusal(a),
            "cached dispatch: pass x (and x_scales) only; top-k goes with the first dispatch");
}

TEST(InternodeDispatchChecks, TokenInRank) {
  DispatchArgs a = good_internode_dispatch();
  a.is_token_in_rank = TensorView{};
  EXPECT_EQ(internode_refusal(a),
            "dispatch: is_token_in_rank must be a row-major bool[16, 16] (from layout())");
}

TEST(InternodeDispatchChecks, TokensPerRank) {
  DispatchArgs a = good_internode_dispatch();
  a.num_tokens_per_rank.dtype = DType::int64;
  EXPECT_EQ(internode_refusal(a),
            "dispatch: num_tokens_per_rank must be int32[16] (from layout())");
}

TEST(InternodeDispatchChecks, TokensPerExpert) {
  DispatchArgs a = good_internode_dispatch();
  a.num_tokens_per_expert = TensorView::vector(k_mem, DType::int32, 24);
  EXPECT_EQ(internode_refusal(a),
            "dispatch: num_tokens_per_expert must be int32[experts], experts a multiple of 16 up "
            "to 1024");
}

TEST(InternodeDispatchChecks, TopKIdx) {
  DispatchArgs a = good_internode_dispatch();
  a.topk_idx.strides[1] = 2;
  EXPECT_EQ(internode_refusal(a),
            "dispatch: topk_idx (int64[16, 4]) must be a row-major int64/int32 [16, 1..8]");
}

TEST(InternodeDispatchChecks, WeightsWithoutTopK) {
  DispatchArgs a = good_internode_dispatch();
  a.topk_idx = TensorView{};
  EXPECT_EQ(internode_refusal(a), "dispatch: topk_weights given without topk_idx");
}

TEST(InternodeDispatchChecks, Weights) {
  DispatchArgs a = good_internode_dispatch();
  a.topk_weights.dtype = DType::bf16;
  EXPECT_EQ(internode_refusal(a),
            "dispatch: topk_weights (bf16[16, 4]) must be row-major fp32 [16, 4]");
}

// "dispatch: N experts per node do not fit the count message" guards the
// message slot internode_layout sizes for the most experts a node can have
// (1024 / nodes), so arguments that pass the expert count check cannot reach
// it: the most experts must fit.
TEST(InternodeDispatchChecks, CountMessageHoldsTheMostExperts) {
  DispatchArgs a = good_internode_dispatch();
  a.num_tokens_per_expert = TensorView::vector(k_mem, DType::int32, 1024);
  EXPECT_EQ(internode_refusal(a), "(accepted)");
}

CombineArgs good_internode_combine() {
  CombineArgs a;
  a.x = TensorView::matrix(k_mem, DType::bf16, 16, 256);
  a.handle = internode_handle(16);
  a.bias[0] = TensorView::matrix(k_mem, DType::bf16, 16, 256);
  return a;
}

TEST(InternodeCombineChecks, AcceptsGoodArguments) {
  EXPECT_EQ(refusal(check_internode_combine(good_internode_combine(), k_world)), "(accepted)");
}

TEST(InternodeCombineChecks, ForeignHandle) {
  CombineArgs a = good_internode_combine();
  a.handle = handle_for(16, k_world);
  EXPECT_EQ(refusal(check_internode_combine(a, k_world)),
            "combine: the handle is not from this internode Buffer's dispatch");
}

TEST(InternodeCombineChecks, Bias) {
  CombineArgs a = good_internode_combine();
  a.bias[1] = TensorView::matrix(k_odd, DType::bf16, 16, 256);
  EXPECT_EQ(refusal(check_internode_combine(a, k_world)),
            "combine: bias 1 (bf16[16, 256]) must be a row-major bf16[16, 256] with 16-byte "
            "aligned rows");
}

// ---- low-latency ----------------------------------------------------------

BufferOptions low_latency_options() {
  BufferOptions o = small_options();
  o.low_latency_bytes = Buffer::low_latency_size_hint(32, 256, k_ranks, 8);
  return o;
}

LowLatencyDispatchArgs good_low_latency_dispatch() {
  LowLatencyDispatchArgs a;
  a.x = TensorView::matrix(k_mem, DType::bf16, 16, 256);
  a.topk_idx = TensorView::matrix(k_mem, DType::int64, 16, 4);
  a.num_max_dispatch_tokens_per_rank = 32;
  a.num_experts = 8;
  return a;
}

std::string low_latency_dispatch_refusal(const LowLatencyDispatchArgs& a) {
  return refusal(check_low_latency_dispatch(a, low_latency_options(), k_ranks));
}

TEST(LowLatencyChecks, AcceptsGoodArguments) {
  ASSERT_GT(low_latency_options().low_latency_bytes, 0u);
  EXPECT_EQ(low_latency_dispatch_refusal(good_low_latency_dispatch()), "(accepted)");
}

TEST(LowLatencyChecks, NoRegion) {
  EXPECT_EQ(
      refusal(check_low_latency_dispatch(good_low_latency_dispatch(), small_options(), k_ranks)),
      "low_latency_dispatch: the Buffer has no low-latency region "
      "(BufferOptions.low_latency_bytes is 0; Buffer::low_latency_size_hint gives what a "
      "shape needs)");
}

TEST(LowLatencyChecks, Shape) {
  LowLatencyDispatchArgs a = good_low_latency_dispatch();
  a.num_experts = 6;
  EXPECT_EQ(low_latency_dispatch_refusal(a),
            "low_latency_dispatch: num_experts = 6: must be 1..1024 and a multiple of the 4 "
            "ranks");
}

TEST(LowLatencyChecks, RegionTooSmall) {
  LowLatencyDispatchArgs a = good_low_latency_dispatch();
  a.num_max_dispatch_tokens_per_rank = 64;
  const BufferOptions o = low_latency_options();
  EXPECT_EQ(low_latency_dispatch_refusal(a),
            fmt::format("low_latency_dispatch: 64 tokens per rank of hidden 256 over 8 experts "
                        "and 4 ranks need {} bytes of low-latency region, the Buffer has {} "
                        "(BufferOptions.low_latency_bytes; see Buffer::low_latency_size_hint)",
                        Buffer::low_latency_size_hint(64, 256, k_ranks, 8), o.low_latency_bytes));
}

TEST(LowLatencyChecks, HookWithAsync) {
  LowLatencyDispatchArgs a = good_low_latency_dispatch();
  a.return_recv_hook = true;
  a.order.async = true;
  EXPECT_EQ(low_latency_dispatch_refusal(a),
            "low_latency_dispatch: return_recv_hook and async together (the hook orders the "
            "caller's stream itself)");
}

TEST(LowLatencyChecks, NumSms) {
  LowLatencyDispatchArgs a = good_low_latency_dispatch();
  a.num_sms = 0;
  EXPECT_EQ(low_latency_dispatch_refusal(a), "low_latency_dispatch: num_sms = 0: must be 1..1024");
}

TEST(LowLatencyChecks, DispatchX) {
  LowLatencyDispatchArgs a = good_low_latency_dispatch();
  a.x.dtype = DType::fp8_e4m3;
  EXPECT_EQ(low_latency_dispatch_refusal(a),
            "low_latency_dispatch: x is fp8_e4m3[16, 256], expected bf16");
}

TEST(LowLatencyChecks, DispatchTokens) {
  LowLatencyDispatchArgs a = good_low_latency_dispatch();
  a.x = TensorView::matrix(k_mem, DType::bf16, 33, 256);
  a.topk_idx = TensorView::matrix(k_mem, DType::int64, 33, 4);
  EXPECT_EQ(low_latency_dispatch_refusal(a),
            "low_latency_dispatch: 33 tokens, more than num_max_dispatch_tokens_per_rank = 32");
}

TEST(LowLatencyChecks, TopKMissing) {
  LowLatencyDispatchArgs a = good_low_latency_dispatch();
  a.topk_idx = TensorView{};
  EXPECT_EQ(low_latency_dispatch_refusal(a), "low_latency_dispatch: topk_idx is missing");
}

TEST(LowLatencyChecks, TopKShape) {
  LowLatencyDispatchArgs a = good_low_latency_dispatch();
  a.topk_idx = TensorView::matrix(k_mem, DType::int64, 16, 17);
  EXPECT_EQ(low_latency_dispatch_refusal(a),
            "low_latency_dispatch: topk_idx (int64[16, 17]) must be a row-major int64/int32 [16, "
            "1..16]");
}

TEST(LowLatencyChecks, Ue8m0NeedsRoundScale) {
  LowLatencyDispatchArgs a = good_low_latency_dispatch();
  a.use_ue8m0 = true;
  EXPECT_EQ(low_latency_dispatch_refusal(a),
            "low_latency_dispatch: use_ue8m0 needs round_scale (UE8M0 holds powers of two)");
}

TEST(LowLatencyChecks, Ue8m0Hidden) {
  LowLatencyDispatchArgs a = good_low_latency_dispatch();
  a.use_ue8m0 = true;
  a.round_scale = true;
  EXPECT_EQ(low_latency_dispatch_refusal(a),
            "low_latency_dispatch: use_ue8m0 packs four scales per int32, so hidden 256 must be a "
            "multiple of 512");
}

TEST(LowLatencyChecks, Stats) {
  LowLatencyDispatchArgs a = good_low_latency_dispatch();
  a.cumulative_local_expert_recv_stats = TensorView::vector(k_mem, DType::int64, 2);
  EXPECT_EQ(low_latency_dispatch_refusal(a),
            "low_latency_dispatch: cumulative_local_expert_recv_stats (int64[2]) must be a "
            "contiguous int32[2]");
}

TEST(LowLatencyChecks, SharedMemory) {
  BufferOptions o = small_options();
  o.max_hidden = 128;
  o.low_latency_bytes = Buffer::low_latency_size_hint(1024, 128, k_ranks, 1024);
  LowLatencyDispatchArgs a;
  a.x = TensorView::matrix(k_mem, DType::bf16, 1024, 128);
  a.topk_idx = TensorView::matrix(k_mem, DType::int64, 1024, 16);
  a.num_max_dispatch_tokens_per_rank = 1024;
  a.num_experts = 1024;
  a.num_sms = 1;
  const std::string message = refusal(check_low_latency_dispatch(a, o, k_ranks));
  EXPECT_EQ(message.rfind("low_latency_dispatch: 1024 tokens of top-16 over 1 blocks and 1024 "
                          "experts need ",
                          0),
            0u)
      << message;
  EXPECT_NE(message.find("bytes of shared memory per block, more than 49152: raise num_sms"),
            std::string::npos)
      << message;
}

LowLatencyCombineArgs good_low_latency_combine() {
  LowLatencyCombineArgs a;
  a.handle.num_max_dispatch_tokens_per_rank = 32;
  a.handle.hidden = 256;
  a.handle.num_experts = 8;
  a.handle.num_ranks = k_ranks;
  a.handle.num_topk = 4;
  // [local experts, ranks * max tokens, hidden]
  a.x = TensorView::tensor3(k_mem, DType::bf16, 2, k_ranks * 32, 256);
  a.topk_idx = TensorView::matrix(k_mem, DType::int64, 16, 4);
  a.topk_weights = TensorView::matrix(k_mem, DType::fp32, 16, 4);
  return a;
}

std::string low_latency_combine_refusal(const LowLatencyCombineArgs& a) {
  return refusal(check_low_latency_combine(a, low_latency_options(), k_ranks));
}

TEST(LowLatencyCombineChecks, AcceptsGoodArguments) {
  EXPECT_EQ(low_latency_combine_refusal(good_low_latency_combine()), "(accepted)");
  LowLatencyCombineArgs a = good_low_latency_combine();
  a.zero_copy = true;
  a.x = TensorView{};
  EXPECT_EQ(low_latency_combine_refusal(a), "(accepted)");
}

TEST(LowLatencyCombineChecks, LogFmt) {
  LowLatencyCombineArgs a = good_low_latency_combine();
  a.use_logfmt = true;
  EXPECT_EQ(low_latency_combine_refusal(a),
            "low_latency_combine: use_logfmt (DeepEP's LogFMT-10 combine) is not supported; "
            "combine BF16");
}

TEST(LowLatencyCombineChecks, Handle) {
  LowLatencyCombineArgs a = good_low_latency_combine();
  a.handle.buffer = 2;
  EXPECT_EQ(low_latency_combine_refusal(a),
            "low_latency_combine: the handle does not come from this Buffer's dispatch");
}

TEST(LowLatencyCombineChecks, XShape) {
  LowLatencyCombineArgs a = good_low_latency_combine();
  a.x = TensorView::tensor3(k_mem, DType::bf16, 2, 64, 256);
  EXPECT_EQ(low_latency_combine_refusal(a),
            "low_latency_combine: x is bf16[2, 64, 256], expected bf16[2, 128, 256] with rows "
            "contiguous");
}

TEST(LowLatencyCombineChecks, XAlignment) {
  LowLatencyCombineArgs a = good_low_latency_combine();
  a.x.data = k_odd;
  EXPECT_EQ(low_latency_combine_refusal(a),
            "low_latency_combine: x rows must start on 16-byte boundaries");
  // Zero-copy: x only names the buffer's shape, its address is not read.
  a.zero_copy = true;
  EXPECT_EQ(low_latency_combine_refusal(a), "(accepted)");
}

TEST(LowLatencyCombineChecks, Tokens) {
  LowLatencyCombineArgs a = good_low_latency_combine();
  a.topk_idx = TensorView::matrix(k_mem, DType::int64, 33, 4);
  EXPECT_EQ(low_latency_combine_refusal(a),
            "low_latency_combine: 33 tokens, more than num_max_dispatch_tokens_per_rank = 32");
}

TEST(LowLatencyCombineChecks, TopKIdx) {
  LowLatencyCombineArgs a = good_low_latency_combine();
  a.topk_idx.dtype = DType::fp32;
  EXPECT_EQ(low_latency_combine_refusal(a),
            "low_latency_combine: topk_idx (fp32[16, 4]) must be a row-major int64/int32 [16, "
            "1..16]");
}

TEST(LowLatencyCombineChecks, TopKOfTheDispatch) {
  LowLatencyCombineArgs a = good_low_latency_combine();
  a.topk_idx = TensorView::matrix(k_mem, DType::int64, 16, 3);
  EXPECT_EQ(low_latency_combine_refusal(a),
            "low_latency_combine: topk_idx has top-3, the dispatch had top-4");
}

TEST(LowLatencyCombineChecks, Weights) {
  LowLatencyCombineArgs a = good_low_latency_combine();
  a.topk_weights.data = nullptr;
  EXPECT_EQ(low_latency_combine_refusal(a),
            "low_latency_combine: topk_weights (fp32[16, 4]) must be a row-major fp32 [16, 4]");
}

TEST(LowLatencyCombineChecks, OutRows) {
  LowLatencyCombineArgs a = good_low_latency_combine();
  a.out = TensorView::matrix(k_odd, DType::bf16, 16, 256);
  EXPECT_EQ(low_latency_combine_refusal(a),
            "low_latency_combine: out rows must start on 16-byte boundaries");
}

TEST(LowLatencyCombineChecks, OutShape) {
  LowLatencyCombineArgs a = good_low_latency_combine();
  a.out = TensorView::matrix(k_mem, DType::bf16, 8, 256);
  EXPECT_EQ(low_latency_combine_refusal(a),
            "low_latency_combine: out is bf16[8, 256], expected bf16[16, 256]");
}

TEST(LowLatencyCombineChecks, Stats) {
  LowLatencyCombineArgs a = good_low_latency_combine();
  a.combine_wait_recv_cost_stats = TensorView::vector(k_mem, DType::int64, 3);
  EXPECT_EQ(low_latency_combine_refusal(a),
            "low_latency_combine: combine_wait_recv_cost_stats (int64[3]) must be a contiguous "
            "int64[4]");
}

}  // namespace
}  // namespace epkit::ep
#endif
