// Buffer::low_latency_combine: argument checks, then the combine kernel
// (send and receive in one launch, or the send now and the receive in the
// hook) writing into `out` or this rank's buffer.
#include <fmt/format.h>

#include "ep/core/buffer_impl.h"
#include "ep/lowlatency/checks.h"

namespace epkit::ep {

Result<LowLatencyCombineResult> BufferImpl::low_latency_combine(const LowLatencyCombineArgs& a) {
  const char* op = "low_latency_combine";
  EPKIT_TRY(check_low_latency_order(op, a.return_recv_hook, a.order, a.num_sms));
  if (a.use_logfmt)
    return invalid(fmt::format(
        "{}: use_logfmt (DeepEP's LogFMT-10 combine) is not supported; combine BF16", op));
  const LowLatencyHandle& h = a.handle;
  if (h.num_ranks != m_ranks || h.buffer < 0 || h.buffer > 1 || h.num_topk < 1)
    return invalid(fmt::format("{}: the handle does not come from this Buffer's dispatch", op));
  auto region = ll_region(op, h.num_max_dispatch_tokens_per_rank, h.hidden, h.num_experts);
  if (!region) return region.error();
  const k::LowLatencyRegion& g = *region;
  const int buffer = m_ll_next;
  std::uint8_t* own = m_peers[m_rank] + m_heap.low_latency;

  // The expert outputs: x, or the zero-copy buffer of this operation.
  const std::uint8_t* x = own + g.buffer[buffer].combine_in;
  std::int64_t x_row = static_cast<std::int64_t>(g.hidden) * 2;
  std::int64_t x_expert = g.rows_per_expert * x_row;
  if (!a.zero_copy || a.x.data != nullptr) {
    const TensorView& v = a.x;
    if (v.dtype != DType::bf16 || v.ndim != 3 || v.shape[0] != g.local_experts ||
        v.shape[1] != g.rows_per_expert || v.shape[2] != g.hidden || v.strides[2] != 1 ||
        v.data == nullptr)
      return invalid(fmt::format("{}: x is {}, expected bf16[{}, {}, {}] with rows contiguous", op,
                                 v.describe(), g.local_experts, g.rows_per_expert, g.hidden));
    if (!a.zero_copy) {
      x = static_cast<const std::uint8_t*>(v.data);
      x_row = v.strides[1] * 2;
      x_expert = v.strides[0] * 2;
      if (!aligned16(x) || x_row % 16 != 0 || x_expert % 16 != 0)
        return invalid(fmt::format("{}: x rows must start on 16-byte boundaries", op));
    }
  }
  const TensorView& idx = a.topk_idx;
  const std::int64_t tokens = idx.rows();
  if (tokens > g.max_tokens)
    return invalid(fmt::format("{}: {} tokens, more than num_max_dispatch_tokens_per_rank = {}", op,
                               tokens, g.max_tokens));
  EPKIT_TRY(check_topk_idx(idx, "low_latency_combine: topk_idx", tokens, k::k_ll_max_topk));
  if (idx.cols() != h.num_topk)
    return invalid(fmt::format("{}: topk_idx has top-{}, the dispatch had top-{}", op, idx.cols(),
                               h.num_topk));
  const TensorView& w = a.topk_weights;
  if (w.dtype != DType::fp32 || w.ndim != 2 || w.strides[1] != 1 || w.rows() != tokens ||
      w.cols() != idx.cols() || (tokens > 0 && w.data == nullptr))
    return invalid(fmt::format("{}: topk_weights ({}) must be a row-major fp32 [{}, {}]", op,
                               w.describe(), tokens, idx.cols()));
  std::uint16_t* out = reinterpret_cast<std::uint16_t*>(own + g.buffer[buffer].combined);
  std::int64_t out_stride = g.hidden;
  if (a.out.data != nullptr) {
    EPKIT_TRY(check_rows(a.out, "low_latency_combine: out", DType::bf16));
    if (a.out.rows() != tokens || a.out.cols() != g.hidden)
      return invalid(fmt::format("{}: out is {}, expected bf16[{}, {}]", op, a.out.describe(),
                                 tokens, g.hidden));
    out = static_cast<std::uint16_t*>(a.out.data);
    out_stride = a.out.strides[0];
  }
  EPKIT_TRY(check_stats(a.combine_wait_recv_cost_stats,
                        "low_latency_combine: combine_wait_recv_cost_stats", DType::int64,
                        m_ranks));

  k::LowLatencyCombineParams p;
  p.c = ll_common(g, buffer, a.return_recv_hook ? k::k_ll_send : k::k_ll_send | k::k_ll_recv);
  p.c.wait_stats = static_cast<long long*>(a.combine_wait_recv_cost_stats.data);
  p.dispatch_buffer = h.buffer;
  p.x = x;
  p.x_expert_stride = x_expert;
  p.x_row_stride = x_row;
  p.topk = idx.data;
  p.topk_int64 = idx.dtype == DType::int64;
  p.topk_stride = idx.strides[0];
  p.weights = static_cast<const float*>(w.data);
  p.weights_stride = w.strides[0];
  p.num_tokens = static_cast<int>(tokens);
  p.num_topk = static_cast<int>(idx.cols());
  p.out = out;
  p.out_stride = out_stride;
  p.num_blocks = a.num_sms;
  auto event = ll_launch(a.order, op, [&] { return k::launch_low_latency_combine(p, m_stream); });
  if (!event) return event.error();
  m_ll_next ^= 1;

  LowLatencyCombineResult result;
  if (a.return_recv_hook) {
    k::LowLatencyCombineParams recv = p;
    recv.c.phases = k::k_ll_recv;
    result.hook = ll_hook(a.order, "low_latency_combine (receive hook)",
                          [this, recv] { return k::launch_low_latency_combine(recv, m_stream); });
  }
  result.combined_x = TensorView{out, DType::bf16, 2, {tokens, g.hidden, 0}, {out_stride, 1, 0}};
  result.event = std::move(*event);
  return result;
}

}  // namespace epkit::ep
