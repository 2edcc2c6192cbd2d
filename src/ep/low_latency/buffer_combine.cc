// Buffer::low_latency_combine: argument checks (checks.cc), then the combine kernel
// (send and receive in one launch, or the send now and the receive in the
// hook) writing into `out` or this rank's buffer.
#include <fmt/format.h>

#include "ep/intranode/buffer.h"
#include "ep/low_latency/checks.h"

namespace epkit::ep {

Result<LowLatencyCombineResult> BufferImpl::low_latency_combine(const LowLatencyCombineArgs& a) {
  const char* op = "low_latency_combine";
  auto region = check_low_latency_combine(a, m_opts, low_latency_ranks());
  if (!region) return region.error();
  const k::LowLatencyRegion& g = *region;
  const LowLatencyHandle& h = a.handle;
  const int buffer = m_low_latency_next;
  std::uint8_t* own = m_peers[m_rank] + m_heap.low_latency;

  // The expert outputs: x, or the zero-copy buffer of this operation.
  const std::uint8_t* x = own + g.buffer[buffer].combine_in;
  std::int64_t x_row = static_cast<std::int64_t>(g.hidden) * 2;
  std::int64_t x_expert = g.rows_per_expert * x_row;
  if (!a.zero_copy) {
    x = static_cast<const std::uint8_t*>(a.x.data);
    x_row = a.x.strides[1] * 2;
    x_expert = a.x.strides[0] * 2;
  }
  const TensorView& idx = a.topk_idx;
  const std::int64_t tokens = idx.rows();
  const TensorView& w = a.topk_weights;
  std::uint16_t* out = reinterpret_cast<std::uint16_t*>(own + g.buffer[buffer].combined);
  std::int64_t out_stride = g.hidden;
  if (a.out.data != nullptr) {
    out = static_cast<std::uint16_t*>(a.out.data);
    out_stride = a.out.strides[0];
  }

  k::LowLatencyCombineParams p;
  p.c = low_latency_common(
      g, buffer,
      a.return_recv_hook ? k::k_low_latency_send : k::k_low_latency_send | k::k_low_latency_recv);
  p.c.wait_stats = static_cast<long long*>(a.combine_wait_recv_cost_stats.data);
  p.dispatch_buffer = h.buffer;
  p.x = x;
  p.x_expert_stride = x_expert;
  p.x_row_stride = x_row;
  // A put to another node reads a registered window: x in this rank's
  // region (the zero-copy input) is one.
  if (x >= own && x < own + m_opts.low_latency_bytes) p.x_region_offset = x - own;
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
  auto event =
      low_latency_launch(a.order, op, [&] { return k::launch_low_latency_combine(p, m_stream); });
  if (!event) return event.error();
  m_low_latency_next ^= 1;
  ++m_low_latency_issued;

  LowLatencyCombineResult result;
  if (a.return_recv_hook) {
    k::LowLatencyCombineParams recv = p;
    recv.c.phases = k::k_low_latency_recv;
    result.hook = low_latency_hook(a.order, "low_latency_combine (receive hook)", [this, recv] {
      return k::launch_low_latency_combine(recv, m_stream);
    });
  }
  result.combined_x = TensorView{out, DType::bf16, 2, {tokens, g.hidden, 0}, {out_stride, 1, 0}};
  result.event = std::move(*event);
  return result;
}

}  // namespace epkit::ep
