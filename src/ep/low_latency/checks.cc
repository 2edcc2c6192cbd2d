// The low-latency mode's argument checks (see checks.h): moved out of the
// launchers (buffer_low_latency.cc, buffer_dispatch.cc, buffer_combine.cc in
// this folder) so that tests/ep/argument_checks_test.cc reaches each refusal
// without a GPU.
#include "ep/low_latency/checks.h"

#include <fmt/format.h>

#include "ep/intranode/buffer.h"
#include "ep/low_latency/region.h"

namespace epkit::ep {

namespace {

constexpr std::size_t k_max_smem = 48 * 1024;

}  // namespace

Result<void> check_stats(const TensorView& v, const char* name, DType dtype, std::int64_t size) {
  if (v.data == nullptr) return {};
  if (v.dtype != dtype || v.ndim != 1 || v.rows() != size || v.strides[0] != 1)
    return invalid(fmt::format("{} ({}) must be a contiguous {}[{}]", name, v.describe(),
                               to_string(dtype), size));
  return {};
}

Result<void> check_topk_idx(const TensorView& t, const char* name, std::int64_t tokens,
                            int max_topk) {
  if (!given(t)) return invalid(fmt::format("{} is missing", name));
  if ((t.dtype != DType::int64 && t.dtype != DType::int32) || t.ndim != 2 || t.strides[1] != 1 ||
      t.rows() != tokens || t.cols() < 1 || t.cols() > max_topk || (t.rows() > 0 && !t.data))
    return invalid(fmt::format("{} ({}) must be a row-major int64/int32 [{}, 1..{}]", name,
                               t.describe(), tokens, max_topk));
  return {};
}

Result<void> check_low_latency_order(const char* op, bool hook, const StreamOrder& order,
                                     int num_sms) {
  if (hook && order.async)
    return invalid(fmt::format(
        "{}: return_recv_hook and async together (the hook orders the caller's stream itself)",
        op));
  if (num_sms < 1 || num_sms > 1024)
    return invalid(fmt::format("{}: num_sms = {}: must be 1..1024", op, num_sms));
  return {};
}

Result<k::LowLatencyRegion> check_low_latency_region(const char* op, const BufferOptions& o,
                                                     int ranks, int max_tokens, int hidden,
                                                     int experts) {
  if (o.low_latency_bytes == 0)
    return invalid(fmt::format(
        "{}: the Buffer has no low-latency region (BufferOptions.low_latency_bytes is 0; "
        "Buffer::low_latency_size_hint gives what a shape needs)",
        op));
  auto region = low_latency::region_for(max_tokens, hidden, ranks, experts);
  if (!region) return invalid(fmt::format("{}: {}", op, region.error().message));
  if (static_cast<std::size_t>(region->total) > o.low_latency_bytes)
    return invalid(fmt::format(
        "{}: {} tokens per rank of hidden {} over {} experts and {} ranks need {} bytes of "
        "low-latency region, the Buffer has {} (BufferOptions.low_latency_bytes; see "
        "Buffer::low_latency_size_hint)",
        op, max_tokens, hidden, experts, ranks, region->total, o.low_latency_bytes));
  return region;
}

Result<k::LowLatencyRegion> check_low_latency_dispatch(const LowLatencyDispatchArgs& a,
                                                       const BufferOptions& o, int ranks) {
  const char* op = "low_latency_dispatch";
  EPKIT_TRY(check_low_latency_order(op, a.return_recv_hook, a.order, a.num_sms));
  EPKIT_TRY(check_rows(a.x, "low_latency_dispatch: x", DType::bf16));
  const int tokens = static_cast<int>(a.x.rows());
  const int hidden = static_cast<int>(a.x.cols());
  auto region = check_low_latency_region(op, o, ranks, a.num_max_dispatch_tokens_per_rank, hidden,
                                         a.num_experts);
  if (!region) return region.error();
  const k::LowLatencyRegion& g = *region;
  if (tokens > g.max_tokens)
    return invalid(fmt::format("{}: {} tokens, more than num_max_dispatch_tokens_per_rank = {}", op,
                               tokens, g.max_tokens));
  EPKIT_TRY(check_topk_idx(a.topk_idx, "low_latency_dispatch: topk_idx", tokens,
                           k::k_low_latency_max_topk));
  const bool fp8 = a.use_fp8;
  const bool ue8m0 = fp8 && a.use_ue8m0;
  if (ue8m0 && !a.round_scale)
    return invalid(fmt::format("{}: use_ue8m0 needs round_scale (UE8M0 holds powers of two)", op));
  if (ue8m0 && hidden % 512 != 0)
    return invalid(fmt::format(
        "{}: use_ue8m0 packs four scales per int32, so hidden {} must be a multiple of 512", op,
        hidden));
  EPKIT_TRY(check_stats(a.cumulative_local_expert_recv_stats,
                        "low_latency_dispatch: cumulative_local_expert_recv_stats", DType::int32,
                        g.local_experts));
  EPKIT_TRY(check_stats(a.dispatch_wait_recv_cost_stats,
                        "low_latency_dispatch: dispatch_wait_recv_cost_stats", DType::int64,
                        ranks));
  const int topk = static_cast<int>(a.topk_idx.cols());
  const std::size_t smem = k::low_latency_dispatch_smem(g.num_experts, tokens, topk, a.num_sms);
  if (smem > k_max_smem)
    return invalid(fmt::format(
        "{}: {} tokens of top-{} over {} blocks and {} experts need {} bytes of shared memory "
        "per block, more than {}: raise num_sms",
        op, tokens, topk, a.num_sms, g.num_experts, smem, k_max_smem));
  return region;
}

Result<k::LowLatencyRegion> check_low_latency_combine(const LowLatencyCombineArgs& a,
                                                      const BufferOptions& o, int ranks) {
  const char* op = "low_latency_combine";
  EPKIT_TRY(check_low_latency_order(op, a.return_recv_hook, a.order, a.num_sms));
  if (a.use_logfmt)
    return invalid(fmt::format(
        "{}: use_logfmt (DeepEP's LogFMT-10 combine) is not supported; combine BF16", op));
  const LowLatencyHandle& h = a.handle;
  if (h.num_ranks != ranks || h.buffer < 0 || h.buffer > 1 || h.num_topk < 1)
    return invalid(fmt::format("{}: the handle does not come from this Buffer's dispatch", op));
  auto region = check_low_latency_region(op, o, ranks, h.num_max_dispatch_tokens_per_rank, h.hidden,
                                         h.num_experts);
  if (!region) return region.error();
  const k::LowLatencyRegion& g = *region;
  if (!a.zero_copy || a.x.data != nullptr) {
    const TensorView& v = a.x;
    if (v.dtype != DType::bf16 || v.ndim != 3 || v.shape[0] != g.local_experts ||
        v.shape[1] != g.rows_per_expert || v.shape[2] != g.hidden || v.strides[2] != 1 ||
        v.data == nullptr)
      return invalid(fmt::format("{}: x is {}, expected bf16[{}, {}, {}] with rows contiguous", op,
                                 v.describe(), g.local_experts, g.rows_per_expert, g.hidden));
    // Read in place (not zero-copy): the kernel loads its rows 16 bytes at
    // a time.
    if (!a.zero_copy &&
        (!aligned16(v.data) || (v.strides[1] * 2) % 16 != 0 || (v.strides[0] * 2) % 16 != 0))
      return invalid(fmt::format("{}: x rows must start on 16-byte boundaries", op));
  }
  const TensorView& idx = a.topk_idx;
  const std::int64_t tokens = idx.rows();
  if (tokens > g.max_tokens)
    return invalid(fmt::format("{}: {} tokens, more than num_max_dispatch_tokens_per_rank = {}", op,
                               tokens, g.max_tokens));
  EPKIT_TRY(
      check_topk_idx(idx, "low_latency_combine: topk_idx", tokens, k::k_low_latency_max_topk));
  if (idx.cols() != h.num_topk)
    return invalid(fmt::format("{}: topk_idx has top-{}, the dispatch had top-{}", op, idx.cols(),
                               h.num_topk));
  const TensorView& w = a.topk_weights;
  if (w.dtype != DType::fp32 || w.ndim != 2 || w.strides[1] != 1 || w.rows() != tokens ||
      w.cols() != idx.cols() || (tokens > 0 && w.data == nullptr))
    return invalid(fmt::format("{}: topk_weights ({}) must be a row-major fp32 [{}, {}]", op,
                               w.describe(), tokens, idx.cols()));
  if (a.out.data != nullptr) {
    EPKIT_TRY(check_rows(a.out, "low_latency_combine: out", DType::bf16));
    if (a.out.rows() != tokens || a.out.cols() != g.hidden)
      return invalid(fmt::format("{}: out is {}, expected bf16[{}, {}]", op, a.out.describe(),
                                 tokens, g.hidden));
  }
  EPKIT_TRY(check_stats(a.combine_wait_recv_cost_stats,
                        "low_latency_combine: combine_wait_recv_cost_stats", DType::int64, ranks));
  return region;
}

}  // namespace epkit::ep
