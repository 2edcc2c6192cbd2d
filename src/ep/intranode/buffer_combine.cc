// Buffer::combine: where the input lives (in the heap, or staged into it),
// then the combine kernel that pulls every token's rows from the ranks that
// hold them.
#include <fmt/format.h>

#include "ep/core/buffer_impl.h"

namespace epkit::ep {

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

Result<CombineResult> BufferImpl::combine(const CombineArgs& a) {
  EPKIT_TRY(a.config.validate());
  if (!a.handle) return invalid("combine: the dispatch handle is missing");
  const DispatchHandle& h = *a.handle;
  if (h.num_ranks != m_ranks)
    return invalid("combine: the handle comes from a Buffer of another size");
  EPKIT_TRY(check_rows(a.x, "combine: x", DType::bf16));
  const int hidden = static_cast<int>(a.x.cols());
  const std::int64_t rows_needed = h.num_worst_tokens > 0 ? h.num_worst_tokens : h.num_recv_tokens;
  if (a.x.rows() < rows_needed || hidden > m_opts.max_hidden || hidden % 8 != 0)
    return invalid(fmt::format(
        "combine: x is {}, expected bf16[{}, hidden] with hidden a multiple of 8 up to {}",
        a.x.describe(), rows_needed, m_opts.max_hidden));
  const bool with_weights = given(a.topk_weights);
  int num_topk = 0;
  if (with_weights) {
    const TensorView& w = a.topk_weights;
    if (w.dtype != DType::fp32 || w.ndim != 2 || w.strides[1] != 1 || w.rows() < rows_needed ||
        w.cols() < 1 || w.cols() > m_opts.max_topk)
      return invalid(fmt::format("combine: topk_weights ({}) must be row-major fp32 [{}, 1..{}]",
                                 w.describe(), rows_needed, m_opts.max_topk));
    num_topk = static_cast<int>(w.cols());
  }
  EPKIT_TRY(check_combine_extras(a, h.num_tokens, hidden, num_topk));
  EPKIT_TRY(enter(a.order));
  std::uint8_t* own = m_peers[m_rank];
  const std::int32_t* recv_count = static_cast<const std::int32_t*>(h.rank_prefix_matrix.data) +
                                   (m_ranks - 1) * m_ranks + m_rank;
  // An input outside the heap is copied into the staging region first: peers
  // can only read what is mapped.
  auto place = [&](const TensorView& v, std::size_t stage, std::int64_t& offset,
                   std::int64_t& stride) -> Result<void> {
    auto* p = static_cast<std::uint8_t*>(v.data);
    std::int64_t elem = static_cast<std::int64_t>(dtype_size(v.dtype));
    std::int64_t span = (v.rows() > 0 ? (v.rows() - 1) * v.strides[0] + v.cols() : 0) * elem;
    if (p >= own && p + span <= own + m_heap.total) {
      offset = p - own;
      stride = v.strides[0] * (v.dtype == DType::bf16 ? elem : 1);
      return {};
    }
    k::StageParams sp;
    sp.src = p;
    sp.src_stride = v.strides[0] * elem;
    sp.dst = own + stage;
    sp.row_bytes = static_cast<int>(v.cols() * elem);
    sp.rows = static_cast<int>(rows_needed);
    sp.rows_from = h.num_worst_tokens > 0 ? recv_count : nullptr;
    sp.num_blocks = a.config.num_sms;
    if (cudaError_t rc = k::launch_stage(sp, m_stream); rc != cudaSuccess)
      return failure(rc, "combine (staging)");
    offset = static_cast<std::int64_t>(stage);
    stride = v.dtype == DType::bf16 ? sp.row_bytes : v.cols();
    return {};
  };
  k::CombineParams cp;
  EPKIT_TRY(place(a.x, m_heap.stage_x, cp.x_offset, cp.x_stride));
  if (with_weights) EPKIT_TRY(place(a.topk_weights, m_heap.stage_w, cp.w_offset, cp.w_stride));
  cp.sync = sync();
  for (int r = 0; r < m_ranks; ++r) {
    cp.meta[r] = meta(r);
    cp.heap[r] = m_peers[r];
  }
  cp.send_row = static_cast<const std::int32_t*>(h.send_row.data);
  cp.num_tokens = h.num_tokens;
  cp.hidden = hidden;
  cp.num_topk = num_topk;
  for (std::size_t b = 0; b < a.bias.size(); ++b)
    if (given(a.bias[b])) {
      cp.bias[b] = static_cast<const std::uint16_t*>(a.bias[b].data);
      cp.bias_stride[b] = a.bias[b].strides[0];
    }
  // The caller's memory when given: the kernel writes the result there.
  auto* out_x = given(a.out_x) ? static_cast<std::uint16_t*>(a.out_x.data) : m_combined_x;
  float* out_w = !with_weights                  ? nullptr
                 : given(a.out_topk_weights) ? static_cast<float*>(a.out_topk_weights.data)
                                             : m_combined_w;
  cp.out_x = out_x;
  cp.out_weights = out_w;
  cp.num_warps = a.config.num_warps;
  cp.chunk = a.config.nvl_chunk;
  cp.num_blocks = a.config.num_sms;
  if (m_notify_apart) {
    k::PeerNotifyParams np{cp.sync,     meta(m_rank), cp.x_offset,
                           cp.x_stride, cp.w_offset,  cp.w_stride};
    if (cudaError_t rc = k::launch_notify_peers(np, m_stream); rc != cudaSuccess)
      return failure(rc, "combine (notify)");
    cp.entry_barrier = false;
  }
  if (cudaError_t rc = k::launch_combine(cp, m_stream); rc != cudaSuccess)
    return failure(rc, "combine");
  auto event = leave(a.order);
  if (!event) return event.error();
  CombineResult out;
  out.combined_x = TensorView::matrix(out_x, DType::bf16, h.num_tokens, hidden);
  if (with_weights)
    out.combined_topk_weights = TensorView::matrix(out_w, DType::fp32, h.num_tokens, num_topk);
  out.event = std::move(*event);
  return out;
}

}  // namespace epkit::ep
