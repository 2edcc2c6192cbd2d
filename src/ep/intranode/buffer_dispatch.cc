// Buffer::layout, dispatch and cached dispatch: the count exchange (notify kernel) and the host's
// wait for the counts, then the dispatch kernel that writes every token into its destinations'
// receive regions. Their argument checks are in checks.cc.
#include <fmt/format.h>

#include <algorithm>

#include "ep/intranode/buffer.h"
#include "ep/intranode/checks.h"

namespace epkit::ep {

k::DispatchParams BufferImpl::dispatch_params(const DispatchArgs& a, const std::int32_t* send_row,
                                              const std::int32_t* prefix) const {
  k::DispatchParams dp;
  dp.sync = sync();
  const int hidden = static_cast<int>(a.x.cols());
  dp.x = static_cast<const std::uint8_t*>(a.x.data);
  dp.x_stride = a.x.strides[0] * static_cast<std::int64_t>(dtype_size(a.x.dtype));
  dp.row_bytes = hidden * static_cast<int>(dtype_size(a.x.dtype));
  if (a.x.dtype == DType::fp8_e4m3) {
    dp.scales = static_cast<const float*>(a.x_scales.data);
    dp.scale_stride_token = a.x_scales.strides[0];
    dp.scale_stride_hidden = a.x_scales.strides[1];
    dp.num_scales = hidden / k::k_scale_block;
  }
  dp.send_row = send_row;
  dp.rank_prefix_matrix = prefix;
  dp.num_tokens = static_cast<int>(a.x.rows());
  dp.experts_per_rank = 1;
  for (int r = 0; r < m_ranks; ++r) {
    dp.recv_x[r] = m_peers[r] + m_heap.recv_x;
    dp.recv_scales[r] = reinterpret_cast<float*>(m_peers[r] + m_heap.recv_scales);
    dp.recv_topk[r] = m_peers[r] + m_heap.recv_topk;
    dp.recv_weights[r] = reinterpret_cast<float*>(m_peers[r] + m_heap.recv_weights);
    dp.recv_src[r] = reinterpret_cast<std::int32_t*>(m_peers[r] + m_heap.recv_src);
  }
  dp.num_warps = a.config.num_warps;
  dp.chunk = a.config.nvl_chunk;
  dp.num_blocks = a.config.num_sms;
  // An internode node's forwarding dispatch runs its barriers apart and
  // writes the fixed regions; an intranode one publishes where its results
  // go (the regions, or the caller's tensors in the arena).
  dp.read_offsets = !m_notify_apart;
  for (int r = 0; r < m_ranks; ++r) {
    dp.meta[r] = meta(r);
    dp.heap[r] = m_peers[r];
  }
  dp.own_offsets[k::k_field_x] = static_cast<std::int64_t>(m_heap.recv_x);
  dp.own_offsets[k::k_field_scales] = static_cast<std::int64_t>(m_heap.recv_scales);
  dp.own_offsets[k::k_field_topk] = static_cast<std::int64_t>(m_heap.recv_topk);
  dp.own_offsets[k::k_field_weights] = static_cast<std::int64_t>(m_heap.recv_weights);
  dp.own_offsets[k::k_field_src] = static_cast<std::int64_t>(m_heap.recv_src);
  return dp;
}

unsigned BufferImpl::place_outputs(const DispatchArgs& a, std::int64_t rows, bool cached,
                                   k::DispatchParams& dp, DispatchOutputs& into) const {
  if (!a.into || !dp.read_offsets) return 0;
  auto asked = a.into(rows);
  if (!asked) return 0;  // not fatal (see DispatchArgs::into): the regions then
  into = std::move(*asked);
  std::uint8_t* own = m_peers[m_rank];
  const std::uint8_t* arena = own + m_heap.arena;
  unsigned written = 0;
  // A result goes into the caller's memory when that is exactly its shape,
  // contiguous and inside the arena (what peers can reach).
  auto take = [&](const TensorView& v, k::DispatchField field, unsigned bit, DType dtype,
                  std::int64_t cols) {
    const bool matrix = field != k::k_field_src;
    if (v.dtype != dtype || v.ndim != (matrix ? 2 : 1) || v.shape[0] != rows) return;
    if (matrix && (v.shape[1] != cols || (rows > 1 && v.strides[0] != cols))) return;
    if (rows > 1 && !matrix && v.strides[0] != 1) return;
    const std::int64_t bytes =
        rows * (matrix ? cols : 1) * static_cast<std::int64_t>(dtype_size(dtype));
    if (bytes > 0) {
      const auto* p = static_cast<const std::uint8_t*>(v.data);
      if (p == nullptr || !aligned16(p) || p < arena || p + bytes > arena + m_heap.arena_bytes)
        return;
      dp.own_offsets[field] = p - own;
    }
    written |= bit;
  };
  const std::int64_t hidden = a.x.cols();
  take(into.recv_x, k::k_field_x, k_out_recv_x, a.x.dtype, hidden);
  if (a.x.dtype == DType::fp8_e4m3)
    take(into.recv_x_scales, k::k_field_scales, k_out_recv_x_scales, DType::fp32,
         hidden / k::k_scale_block);
  take(into.recv_src_idx, k::k_field_src, k_out_recv_src_idx, DType::int32, 1);
  if (cached) return written;
  if (given(a.topk_idx)) {
    take(into.recv_topk_idx, k::k_field_topk, k_out_recv_topk_idx, a.topk_idx.dtype,
         a.topk_idx.cols());
    if (given(a.topk_weights))
      take(into.recv_topk_weights, k::k_field_weights, k_out_recv_topk_weights, DType::fp32,
           a.topk_idx.cols());
  }
  const TensorView& pm = into.rank_prefix_matrix;
  if (pm.data != nullptr && pm.dtype == DType::int32 && pm.ndim == 2 && pm.shape[0] == m_ranks &&
      pm.shape[1] == m_ranks && pm.strides[0] == m_ranks && pm.strides[1] == 1) {
    dp.prefix_out = static_cast<std::int32_t*>(pm.data);
    written |= k_out_rank_prefix_matrix;
  }
  return written;
}

Result<Layout> BufferImpl::layout(const TensorView& topk, int num_experts, const StreamOrder& order,
                                  const LayoutOutputs& into) {
  auto params = layout_params(topk, num_experts, m_ranks, m_opts.max_tokens);
  if (!params) return params.error();
  EPKIT_TRY(check_layout_outputs(into, topk, m_ranks, num_experts, 1));
  EPKIT_TRY(enter(order));
  k::LayoutParams p = *params;
  p.num_tokens_per_rank = output_or(into.num_tokens_per_rank, m_tokens_per_rank);
  p.num_tokens_per_expert = output_or(into.num_tokens_per_expert, m_tokens_per_expert);
  p.is_token_in_rank = output_or(into.is_token_in_rank, m_token_in_rank);
  p.topk_copy = into.topk_idx_copy.data;
  p.mailbox = m_mailbox_dev;
  if (cudaError_t rc = k::launch_layout(p, m_stream); rc != cudaSuccess)
    return failure(rc, "layout");
  auto event = leave(order);
  if (!event) return event.error();
  Layout out;
  out.num_tokens_per_rank = TensorView::vector(p.num_tokens_per_rank, DType::int32, m_ranks);
  out.num_tokens_per_expert =
      TensorView::vector(p.num_tokens_per_expert, DType::int32, num_experts);
  out.is_token_in_rank =
      TensorView::matrix(p.is_token_in_rank, DType::boolean, topk.rows(), m_ranks);
  out.event = std::move(*event);
  return out;
}

Result<DispatchResult> BufferImpl::dispatch(const DispatchArgs& a) {
  return dispatch_segments(a, nullptr);
}

Result<DispatchResult> BufferImpl::dispatch_segments(const DispatchArgs& a, const Segments* seg) {
  EPKIT_TRY(check_dispatch(a, m_ranks, m_opts,
                           seg != nullptr ? std::optional<int>(seg->num_experts) : std::nullopt));
  if (a.handle) return dispatch_cached(a);
  const TensorView& x = a.x;
  const bool fp8 = x.dtype == DType::fp8_e4m3;
  const int tokens = static_cast<int>(x.rows());
  const int hidden = static_cast<int>(x.cols());
  const bool with_topk = given(a.topk_idx);
  const int num_topk = with_topk ? static_cast<int>(a.topk_idx.cols()) : 0;
  const bool with_weights = given(a.topk_weights);
  const TensorView& ntpr = a.num_tokens_per_rank;
  const TensorView& itir = a.is_token_in_rank;
  const TensorView& ntpe = a.num_tokens_per_expert;
  const int num_experts = seg != nullptr ? seg->num_experts : static_cast<int>(ntpe.numel());

  EPKIT_TRY(enter(a.order));
  void* memory = nullptr;
  std::size_t handle_ints =
      static_cast<std::size_t>(tokens) * m_ranks + static_cast<std::size_t>(m_ranks) * m_ranks;
  cudaError_t rc =
      cudaMallocAsync(&memory, std::max<std::size_t>(handle_ints, 1) * sizeof(int), m_stream);
  if (rc != cudaSuccess) return failure(rc, "cudaMallocAsync of the dispatch handle");
  auto handle = std::make_shared<Handle>(memory, m_stream_owner);
  auto* prefix = static_cast<std::int32_t*>(memory);
  auto* send_row = prefix + m_ranks * m_ranks;

  k::NotifyParams np;
  np.sync = sync();
  np.count_seq = ++m_count_seq;
  np.num_tokens_per_rank = static_cast<const std::int32_t*>(ntpr.data);
  np.num_tokens_per_expert = static_cast<const std::int32_t*>(ntpe.data);
  np.is_token_in_rank = static_cast<const bool*>(itir.data);
  np.is_token_in_rank_stride = itir.strides[0];
  np.num_tokens = tokens;
  np.num_experts = num_experts;
  np.expert_alignment = a.expert_alignment;
  np.num_worst_tokens = a.num_worst_tokens;
  for (int r = 0; r < m_ranks; ++r) np.meta[r] = meta(r);
  np.rank_prefix_matrix = prefix;
  np.send_row = send_row;
  np.recv_tokens_per_expert = m_recv_per_expert;
  np.offsets_scratch = m_offsets_scratch;
  if (seg != nullptr) {
    np.num_tokens_per_rank = seg->tokens_per_rank;
    np.num_tokens_per_expert = seg->tokens_per_expert;
    np.num_segments = seg->count;
    np.segment_stride_ranks = seg->rank_stride;
    np.segment_stride_experts = seg->expert_stride;
    std::copy(seg->begin, seg->begin + seg->count + 1, np.segment_begin);
    np.recv_gbl_prefix = seg->recv_gbl_prefix;
    np.segment_begin_device = seg->begin_device;
    if (seg->begin_device != nullptr) handle->num_tokens_device = seg->begin_device + seg->count;
  }
  if ((rc = k::launch_notify(np, m_stream)) != cudaSuccess)
    return failure(rc, "dispatch (count exchange)");

  DispatchResult out;
  int rows = a.num_worst_tokens;
  if (a.num_worst_tokens == 0) {
    EPKIT_TRY(wait_counts(np.count_seq));
    if (m_mailbox->error == k::k_bad_expert) {
      long long token = m_mailbox->error_rank;
      long long value = m_mailbox->error_value;
      m_mailbox->error = 0;
      return invalid(fmt::format("topk_idx of token {} names expert {}, outside -1..{}", token,
                                 value, num_experts - 1));
    }
    rows = m_mailbox->num_recv;
    const int experts_per_rank = num_experts / m_ranks;
    out.num_recv_tokens_per_expert.resize(static_cast<std::size_t>(experts_per_rank));
    for (int e = 0; e < experts_per_rank; ++e)
      out.num_recv_tokens_per_expert[static_cast<std::size_t>(e)] = m_mailbox->expert_counts[e];
  }

  k::DispatchParams dp = dispatch_params(a, send_row, prefix);
  // The count exchange was a barrier; a dispatch that publishes where its
  // results go needs one more after that (the caller chose the memory
  // once it knew the counts).
  dp.entry_barrier = dp.read_offsets;
  dp.entry_epoch = 2;
  dp.exit_epoch = dp.read_offsets ? 3 : 2;
  DispatchOutputs into;
  const unsigned written = place_outputs(a, rows, false, dp, into);
  if (with_topk) {
    dp.topk = a.topk_idx.data;
    dp.topk_int64 = a.topk_idx.dtype == DType::int64;
    dp.topk_stride = a.topk_idx.strides[0];
    dp.num_topk = num_topk;
    dp.weights = static_cast<const float*>(a.topk_weights.data);
    dp.weights_stride = a.topk_weights.strides[0];
  }
  dp.experts_per_rank = num_experts / m_ranks;
  dp.num_worst_tokens = a.num_worst_tokens;
  if ((rc = k::launch_dispatch(dp, m_stream)) != cudaSuccess) return failure(rc, "dispatch");
  auto event = leave(a.order);
  if (!event) return event.error();

  handle->num_tokens = tokens;
  handle->num_ranks = m_ranks;
  handle->hidden = hidden;
  handle->num_recv_tokens = a.num_worst_tokens == 0 ? rows : -1;
  handle->num_worst_tokens = a.num_worst_tokens;
  handle->rank_prefix_matrix = TensorView::matrix(prefix, DType::int32, m_ranks, m_ranks);
  handle->send_row = TensorView::matrix(send_row, DType::int32, tokens, m_ranks);

  std::uint8_t* own = m_peers[m_rank];
  out.recv_x = (written & k_out_recv_x) != 0
                   ? into.recv_x
                   : TensorView::matrix(own + m_heap.recv_x, x.dtype, rows, hidden);
  if (fp8)
    out.recv_x_scales = (written & k_out_recv_x_scales) != 0
                            ? into.recv_x_scales
                            : TensorView::matrix(own + m_heap.recv_scales, DType::fp32, rows,
                                                 hidden / k::k_scale_block);
  if (with_topk) {
    out.recv_topk_idx =
        (written & k_out_recv_topk_idx) != 0
            ? into.recv_topk_idx
            : TensorView::matrix(own + m_heap.recv_topk, a.topk_idx.dtype, rows, num_topk);
    if (with_weights)
      out.recv_topk_weights =
          (written & k_out_recv_topk_weights) != 0
              ? into.recv_topk_weights
              : TensorView::matrix(own + m_heap.recv_weights, DType::fp32, rows, num_topk);
  }
  out.recv_src_idx = (written & k_out_recv_src_idx) != 0
                         ? into.recv_src_idx
                         : TensorView::vector(own + m_heap.recv_src, DType::int32, rows);
  out.written = written;
  out.recv_tokens_per_expert =
      TensorView::vector(m_recv_per_expert, DType::int32, num_experts / m_ranks);
  out.handle = std::move(handle);
  out.event = std::move(*event);
  return out;
}

Result<DispatchResult> BufferImpl::dispatch_arriving(const DispatchArgs& a,
                                                     const k::LegChunks& arrival) {
  if (!a.handle) return invalid("dispatch: rows arriving over the leg need a cached handle");
  EPKIT_TRY(check_dispatch(a, m_ranks, m_opts, std::nullopt));
  return dispatch_cached(a, &arrival);
}

Result<DispatchResult> BufferImpl::dispatch_cached(const DispatchArgs& a,
                                                   const k::LegChunks* arrival) {
  const DispatchHandle& h = *a.handle;
  const int hidden = static_cast<int>(a.x.cols());
  EPKIT_TRY(enter(a.order));
  k::DispatchParams dp =
      dispatch_params(a, static_cast<const std::int32_t*>(h.send_row.data),
                      static_cast<const std::int32_t*>(h.rank_prefix_matrix.data));
  dp.entry_barrier = true;  // receive regions may still be read until every rank is here
  if (m_notify_apart) {
    if (cudaError_t rc = k::launch_notify_peers({dp.sync}, m_stream); rc != cudaSuccess)
      return failure(rc, "cached dispatch (notify)");
    dp.entry_barrier = false;
  }
  if (arrival != nullptr) dp.arrival = *arrival;
  const bool fp8 = a.x.dtype == DType::fp8_e4m3;
  const int rows = h.num_worst_tokens > 0 ? h.num_worst_tokens : h.num_recv_tokens;
  DispatchOutputs into;
  const unsigned written = place_outputs(a, rows, true, dp, into);
  if (cudaError_t rc = k::launch_dispatch(dp, m_stream); rc != cudaSuccess)
    return failure(rc, "cached dispatch");
  auto event = leave(a.order);
  if (!event) return event.error();
  DispatchResult out;
  std::uint8_t* own = m_peers[m_rank];
  out.recv_x = (written & k_out_recv_x) != 0
                   ? into.recv_x
                   : TensorView::matrix(own + m_heap.recv_x, a.x.dtype, rows, hidden);
  if (fp8)
    out.recv_x_scales = (written & k_out_recv_x_scales) != 0
                            ? into.recv_x_scales
                            : TensorView::matrix(own + m_heap.recv_scales, DType::fp32, rows,
                                                 hidden / k::k_scale_block);
  out.recv_src_idx = (written & k_out_recv_src_idx) != 0
                         ? into.recv_src_idx
                         : TensorView::vector(own + m_heap.recv_src, DType::int32, rows);
  out.written = written;
  out.handle = a.handle;
  out.event = std::move(*event);
  return out;
}

}  // namespace epkit::ep
