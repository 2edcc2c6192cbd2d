// Buffer::low_latency_dispatch: argument checks (checks.cc), then the dispatch kernel
// (send and receive in one launch, or the send now and the receive in the
// hook), and the expert-major views of this rank's buffer.
#include <fmt/format.h>

#include "ep/intranode/buffer.h"
#include "ep/low_latency/checks.h"

namespace epkit::ep {

Result<LowLatencyDispatchResult> BufferImpl::low_latency_dispatch(const LowLatencyDispatchArgs& a) {
  const char* op = "low_latency_dispatch";
  auto region = check_low_latency_dispatch(a, m_opts, low_latency_ranks());
  if (!region) return region.error();
  const k::LowLatencyRegion& g = *region;
  const int tokens = static_cast<int>(a.x.rows());
  const int hidden = static_cast<int>(a.x.cols());
  const bool fp8 = a.use_fp8;
  const bool ue8m0 = fp8 && a.use_ue8m0;
  const int topk = static_cast<int>(a.topk_idx.cols());

  const int buffer = m_low_latency_next;
  k::LowLatencyDispatchParams p;
  p.c = low_latency_common(
      g, buffer,
      a.return_recv_hook ? k::k_low_latency_send : k::k_low_latency_send | k::k_low_latency_recv);
  p.c.wait_stats = static_cast<long long*>(a.dispatch_wait_recv_cost_stats.data);
  p.x = static_cast<const std::uint8_t*>(a.x.data);
  p.x_stride = a.x.strides[0] * 2;
  p.topk = a.topk_idx.data;
  p.topk_int64 = a.topk_idx.dtype == DType::int64;
  p.topk_stride = a.topk_idx.strides[0];
  p.num_tokens = tokens;
  p.num_topk = topk;
  p.fp8 = fp8;
  p.round_scale = fp8 && a.round_scale;
  p.ue8m0 = ue8m0;
  p.cumulative_stats = static_cast<std::int32_t*>(a.cumulative_local_expert_recv_stats.data);
  p.num_blocks = a.num_sms;
  auto event =
      low_latency_launch(a.order, op, [&] { return k::launch_low_latency_dispatch(p, m_stream); });
  if (!event) return event.error();
  m_low_latency_next ^= 1;
  ++m_low_latency_issued;

  LowLatencyDispatchResult out;
  if (a.return_recv_hook) {
    k::LowLatencyDispatchParams recv = p;
    recv.c.phases = k::k_low_latency_recv;
    out.hook = low_latency_hook(a.order, "low_latency_dispatch (receive hook)", [this, recv] {
      return k::launch_low_latency_dispatch(recv, m_stream);
    });
  }
  std::uint8_t* own = m_peers[m_rank] + m_heap.low_latency;
  const auto& b = g.buffer[buffer];
  const std::int64_t L = g.local_experts;
  const std::int64_t rows = g.rows_per_expert;
  out.recv_x =
      TensorView::tensor3(own + b.recv_x, fp8 ? DType::fp8_e4m3 : DType::bf16, L, rows, hidden);
  if (fp8) {
    const std::int64_t cols = ue8m0 ? g.num_scales / 4 : g.num_scales;
    out.recv_x_scales = TensorView{own + b.recv_scales,
                                   ue8m0 ? DType::int32 : DType::fp32,
                                   3,
                                   {L, rows, cols},
                                   {cols * rows, 1, rows}};
  }
  out.recv_count = TensorView::vector(own + b.recv_count, DType::int32, L);
  LowLatencyHandle& h = out.handle;
  h.src_info = TensorView::matrix(own + b.src_info, DType::int32, L, rows);
  h.layout_range = TensorView::matrix(own + b.layout_range, DType::int64, L, low_latency_ranks());
  h.recv_count = out.recv_count;
  h.num_max_dispatch_tokens_per_rank = g.max_tokens;
  h.hidden = hidden;
  h.num_experts = g.num_experts;
  h.num_ranks = low_latency_ranks();
  h.num_topk = topk;
  h.buffer = buffer;
  out.event = std::move(*event);
  return out;
}

}  // namespace epkit::ep
