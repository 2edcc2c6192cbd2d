// The intranode Buffer's argument checks (see checks.h): moved out of the
// launchers (buffer.cc's init, buffer_dispatch.cc, buffer_combine.cc) so that
// tests/ep/argument_checks_test.cc reaches each refusal without a GPU.
#include "ep/intranode/checks.h"

#include <fmt/format.h>

namespace epkit::ep {

Result<HeapLayout> check_buffer_options(const BufferOptions& o, int ranks) {
  if (ranks < 1 || ranks > k::k_max_ranks)
    return invalid(
        fmt::format("a Buffer spans 1 to {} ranks of one node, not {}", k::k_max_ranks, ranks));
  if (o.max_tokens < 0 || o.max_hidden <= 0 || o.max_hidden % k::k_scale_block != 0)
    return invalid(
        fmt::format("BufferOptions: max_tokens {} must be >= 0 and max_hidden {} a positive "
                    "multiple of {}",
                    o.max_tokens, o.max_hidden, k::k_scale_block));
  if (o.max_topk < 1 || o.max_topk > 32)
    return invalid(fmt::format("BufferOptions.max_topk = {}: must be 1..32", o.max_topk));
  if (!(o.timeout_s > 0)) return invalid("BufferOptions.timeout_s must be positive");
  if (o.low_latency_bytes != 0 && o.low_latency_bytes < sizeof(k::LowLatencyHeader))
    return invalid(fmt::format(
        "BufferOptions.low_latency_bytes = {}: at least {} (Buffer::low_latency_size_hint gives "
        "what a shape needs), or 0 for no low-latency region",
        o.low_latency_bytes, sizeof(k::LowLatencyHeader)));
  if (o.output_arena_bytes > (std::size_t{1} << 40))
    return invalid(fmt::format("BufferOptions.output_arena_bytes = {}: at most 1 TiB",
                               o.output_arena_bytes));
  const HeapLayout heap = heap_layout(o, ranks);
  // The arena comes on top of num_bytes (it holds the caller's outputs,
  // which DeepEP allocates outside its buffer too).
  const std::size_t need = heap.core;
  if (o.num_bytes != 0 && o.num_bytes < need)
    return invalid(fmt::format(
        "the Buffer needs {} bytes per GPU for {} ranks x {} tokens x hidden {} (top-{}), but "
        "num_bytes allows {}",
        need, ranks, o.max_tokens, o.max_hidden, o.max_topk, o.num_bytes));
  return heap;
}

Result<k::LayoutParams> layout_params(const TensorView& topk, int num_experts, int ranks,
                                      int max_tokens) {
  if (topk.data == nullptr && topk.numel() != 0) return invalid("layout: topk_idx is missing");
  if ((topk.dtype != DType::int64 && topk.dtype != DType::int32) || topk.ndim != 2 ||
      topk.strides[1] != 1)
    return invalid(fmt::format("layout: topk_idx ({}) must be a row-major int64 or int32 matrix",
                               topk.describe()));
  if (topk.rows() > max_tokens)
    return invalid(fmt::format("layout: {} tokens, the Buffer was made for at most {}", topk.rows(),
                               max_tokens));
  if (topk.cols() > 32) return invalid("layout: top-k is at most 32");
  if (num_experts <= 0 || num_experts > k::k_max_experts || num_experts % ranks != 0)
    return invalid(fmt::format("layout: {} experts must be 1..{} and a multiple of the {} ranks",
                               num_experts, k::k_max_experts, ranks));
  k::LayoutParams p;
  p.topk = topk.data;
  p.topk_int64 = topk.dtype == DType::int64;
  p.topk_stride = topk.strides[0];
  p.num_tokens = static_cast<int>(topk.rows());
  p.num_topk = static_cast<int>(topk.cols());
  p.num_experts = num_experts;
  p.num_ranks = ranks;
  return p;
}

Result<void> check_dispatch(const DispatchArgs& a, int ranks, const BufferOptions& o,
                            std::optional<int> segment_experts) {
  EPKIT_TRY(a.config.validate());
  const TensorView& x = a.x;
  if (x.dtype != DType::bf16 && x.dtype != DType::fp8_e4m3)
    return invalid(fmt::format("dispatch: x is {}, expected bf16 or fp8_e4m3", x.describe()));
  EPKIT_TRY(check_rows(x, "dispatch: x", x.dtype));
  const bool fp8 = x.dtype == DType::fp8_e4m3;
  const int tokens = static_cast<int>(x.rows());
  const int hidden = static_cast<int>(x.cols());
  if (tokens > o.max_tokens || hidden > o.max_hidden)
    return invalid(
        fmt::format("dispatch: x is {}, the Buffer was made for at most {} tokens of hidden {}",
                    x.describe(), o.max_tokens, o.max_hidden));
  if ((hidden * static_cast<int>(dtype_size(x.dtype))) % 16 != 0)
    return invalid(
        fmt::format("dispatch: rows of {} are not a multiple of 16 bytes", x.describe()));
  if (fp8) {
    if (hidden % k::k_scale_block != 0)
      return invalid(fmt::format("dispatch: FP8 hidden {} must be a multiple of {}", hidden,
                                 k::k_scale_block));
    const TensorView& s = a.x_scales;
    if (!given(s) || s.dtype != DType::fp32 || s.ndim != 2 || s.rows() != tokens ||
        s.cols() != hidden / k::k_scale_block)
      return invalid(fmt::format("dispatch: FP8 x needs x_scales fp32[{}, {}], got {}", tokens,
                                 hidden / k::k_scale_block, !given(s) ? "none" : s.describe()));
  } else if (given(a.x_scales)) {
    return invalid("dispatch: x_scales given with a BF16 x (scales go with FP8 only)");
  }
  if (a.num_worst_tokens < 0 || a.num_worst_tokens > ranks * o.max_tokens)
    return invalid(fmt::format("dispatch: num_worst_tokens {} must be 0..{}", a.num_worst_tokens,
                               ranks * o.max_tokens));
  if (a.expert_alignment < 1) return invalid("dispatch: expert_alignment must be >= 1");
  if (a.handle) {
    const DispatchHandle& h = *a.handle;
    if (h.num_ranks != ranks || h.num_tokens != tokens)
      return invalid(fmt::format(
          "cached dispatch: the handle is for {} tokens over {} ranks, x has {} tokens over {}",
          h.num_tokens, h.num_ranks, tokens, ranks));
    if (given(a.topk_idx) || given(a.topk_weights))
      return invalid(
          "cached dispatch: pass x (and x_scales) only; top-k goes with the first dispatch");
    return {};
  }

  const bool with_topk = given(a.topk_idx);
  int num_topk = 0;
  if (with_topk) {
    const TensorView& t = a.topk_idx;
    if ((t.dtype != DType::int64 && t.dtype != DType::int32) || t.ndim != 2 || t.strides[1] != 1 ||
        t.rows() != tokens || t.cols() < 1 || t.cols() > o.max_topk)
      return invalid(
          fmt::format("dispatch: topk_idx ({}) must be a row-major int64/int32 [{}, 1..{}]",
                      t.describe(), tokens, o.max_topk));
    num_topk = static_cast<int>(t.cols());
  }
  const bool with_weights = given(a.topk_weights);
  if (with_weights) {
    const TensorView& w = a.topk_weights;
    if (!with_topk) return invalid("dispatch: topk_weights given without topk_idx");
    if (w.dtype != DType::fp32 || w.ndim != 2 || w.strides[1] != 1 || w.rows() != tokens ||
        w.cols() != num_topk)
      return invalid(fmt::format("dispatch: topk_weights ({}) must be row-major fp32 [{}, {}]",
                                 w.describe(), tokens, num_topk));
  }
  const TensorView& ntpr = a.num_tokens_per_rank;
  const TensorView& itir = a.is_token_in_rank;
  const TensorView& ntpe = a.num_tokens_per_expert;
  if (!segment_experts &&
      (ntpr.data == nullptr || ntpr.dtype != DType::int32 || ntpr.numel() != ranks))
    return invalid(
        fmt::format("dispatch: num_tokens_per_rank must be int32[{}] (from layout())", ranks));
  if (!given(itir) || itir.dtype != DType::boolean || itir.ndim != 2 || itir.rows() != tokens ||
      itir.cols() != ranks || itir.strides[1] != 1)
    return invalid(
        fmt::format("dispatch: is_token_in_rank must be a row-major bool[{}, {}] (from layout())",
                    tokens, ranks));
  const int num_experts = segment_experts ? *segment_experts : static_cast<int>(ntpe.numel());
  if ((!segment_experts && (ntpe.data == nullptr || ntpe.dtype != DType::int32)) ||
      num_experts <= 0 || num_experts > k::k_max_experts || num_experts % ranks != 0)
    return invalid(
        fmt::format("dispatch: num_tokens_per_expert must be int32[experts], experts a multiple of "
                    "{} up to {}",
                    ranks, k::k_max_experts));
  return {};
}

Result<void> check_combine(const CombineArgs& a, int ranks, const BufferOptions& o) {
  EPKIT_TRY(a.config.validate());
  if (!a.handle) return invalid("combine: the dispatch handle is missing");
  const DispatchHandle& h = *a.handle;
  if (h.num_ranks != ranks)
    return invalid("combine: the handle comes from a Buffer of another size");
  EPKIT_TRY(check_rows(a.x, "combine: x", DType::bf16));
  const int hidden = static_cast<int>(a.x.cols());
  const std::int64_t rows_needed = h.num_worst_tokens > 0 ? h.num_worst_tokens : h.num_recv_tokens;
  if (a.x.rows() < rows_needed || hidden > o.max_hidden || hidden % 8 != 0)
    return invalid(fmt::format(
        "combine: x is {}, expected bf16[{}, hidden] with hidden a multiple of 8 up to {}",
        a.x.describe(), rows_needed, o.max_hidden));
  if (given(a.topk_weights)) {
    const TensorView& w = a.topk_weights;
    if (w.dtype != DType::fp32 || w.ndim != 2 || w.strides[1] != 1 || w.rows() < rows_needed ||
        w.cols() < 1 || w.cols() > o.max_topk)
      return invalid(fmt::format("combine: topk_weights ({}) must be row-major fp32 [{}, 1..{}]",
                                 w.describe(), rows_needed, o.max_topk));
  }
  return check_combine_extras(a, h.num_tokens, hidden,
                              given(a.topk_weights) ? a.topk_weights.cols() : 0);
}

Result<void> check_layout_outputs(const LayoutOutputs& into, const TensorView& topk, int ranks,
                                  int experts, int nodes) {
  const std::int64_t tokens = topk.rows();
  auto check = [](const TensorView& v, const char* name, DType dtype, std::int64_t rows,
                  std::int64_t cols, bool matrix) -> Result<void> {
    if (v.data == nullptr) return {};
    const bool shape_ok = matrix ? v.ndim == 2 && v.rows() == rows && v.cols() == cols &&
                                       v.strides[1] == 1 && v.strides[0] == cols
                                 : v.ndim == 1 && v.rows() == rows && v.strides[0] == 1;
    if (v.dtype != dtype || !shape_ok)
      return invalid(fmt::format("layout: {} ({}) must be a contiguous {}[{}{}]", name,
                                 v.describe(), to_string(dtype), rows,
                                 matrix ? fmt::format(", {}", cols) : std::string()));
    return {};
  };
  EPKIT_TRY(check(into.num_tokens_per_rank, "num_tokens_per_rank", DType::int32, ranks, 1, false));
  EPKIT_TRY(
      check(into.num_tokens_per_expert, "num_tokens_per_expert", DType::int32, experts, 1, false));
  EPKIT_TRY(check(into.is_token_in_rank, "is_token_in_rank", DType::boolean, tokens, ranks, true));
  if (nodes <= 1 && into.num_tokens_per_rdma_rank.data != nullptr)
    return invalid("layout: num_tokens_per_rdma_rank is for internode Buffers only");
  EPKIT_TRY(check(into.num_tokens_per_rdma_rank, "num_tokens_per_rdma_rank", DType::int32, nodes,
                  1, false));
  EPKIT_TRY(check(into.topk_idx_copy, "topk_idx_copy", topk.dtype, tokens, topk.cols(), true));
  return {};
}

Result<void> check_combine_extras(const CombineArgs& a, std::int64_t tokens, std::int64_t hidden,
                                  std::int64_t num_topk) {
  for (std::size_t b = 0; b < a.bias.size(); ++b) {
    const TensorView& bias = a.bias[b];
    if (!given(bias)) continue;
    if (bias.dtype != DType::bf16 || bias.ndim != 2 || bias.rows() != tokens ||
        bias.cols() != hidden || bias.strides[1] != 1 || !aligned16(bias.data) ||
        bias.strides[0] % 8 != 0)
      return invalid(fmt::format(
          "combine: bias {} ({}) must be a row-major bf16[{}, {}] with 16-byte aligned rows", b,
          bias.describe(), tokens, hidden));
  }
  if (given(a.out_x)) {
    const TensorView& o = a.out_x;
    if (o.dtype != DType::bf16 || o.ndim != 2 || o.rows() != tokens || o.cols() != hidden ||
        o.strides[1] != 1 || o.strides[0] != hidden || !aligned16(o.data))
      return invalid(fmt::format("combine: out_x ({}) must be a contiguous bf16[{}, {}], 16-byte "
                                 "aligned",
                                 o.describe(), tokens, hidden));
  }
  if (given(a.out_topk_weights)) {
    const TensorView& o = a.out_topk_weights;
    if (num_topk == 0)
      return invalid("combine: out_topk_weights given without topk_weights to combine");
    if (o.dtype != DType::fp32 || o.ndim != 2 || o.rows() != tokens || o.cols() != num_topk ||
        o.strides[1] != 1 || o.strides[0] != num_topk)
      return invalid(fmt::format("combine: out_topk_weights ({}) must be a contiguous fp32[{}, {}]",
                                 o.describe(), tokens, num_topk));
  }
  return {};
}

}  // namespace epkit::ep
