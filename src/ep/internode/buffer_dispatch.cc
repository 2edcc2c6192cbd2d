// InternodeBuffer::dispatch: plan and pack per destination node, trade the
// count messages and then the buckets over the rail, and forward the
// received rows to the node's ranks with the intranode kernels (segmented
// counts, so every rank receives rows in global source rank order).
#include <fmt/format.h>

#include <algorithm>

#include "ep/internode/buffer.h"
#include "ep/internode/checks.h"

namespace epkit::ep {
namespace {

/// A strided view of one packed field of `rows` received rows.
TensorView field(std::uint8_t* rows_base, const k::RowFormat& f, int offset, DType dtype,
                 std::int64_t rows, std::int64_t cols) {
  TensorView v = TensorView::matrix(rows_base + offset, dtype, rows, cols);
  v.strides[0] = f.pitch / static_cast<std::int64_t>(dtype_size(dtype));
  return v;
}

/// What a dispatch and a cached dispatch pack alike: x and its scales into
/// the buckets (`bucket_stride` bytes apart) at each token's rows.
k::PackParams pack_params(const DispatchArgs& a, const k::RowFormat& f,
                          const std::int32_t* send_row, int nodes, std::uint8_t* buckets,
                          std::int64_t bucket_stride, std::uint64_t* leg_number) {
  k::PackParams pk;
  pk.format = f;
  pk.send_row = send_row;
  pk.num_tokens = static_cast<int>(a.x.rows());
  pk.num_nodes = nodes;
  pk.x = static_cast<const std::uint8_t*>(a.x.data);
  pk.x_stride = a.x.strides[0] * static_cast<std::int64_t>(dtype_size(a.x.dtype));
  if (f.num_scales > 0) {
    pk.scales = static_cast<const float*>(a.x_scales.data);
    pk.scale_stride_token = a.x_scales.strides[0];
    pk.scale_stride_hidden = a.x_scales.strides[1];
  }
  pk.buckets = buckets;
  pk.bucket_stride = bucket_stride;
  pk.num_blocks = a.config.num_sms;
  pk.num_warps = a.config.num_warps;
  pk.leg_number = leg_number;
  return pk;
}

}  // namespace

Result<void> InternodeBuffer::exchange_messages_on_leg(std::int32_t* sent,
                                                       const k::MessageFormat& mf,
                                                       const InternodeHandle& handle) {
  cudaStream_t stream = m_local->comm_stream();
  const int mi = m_mem_layout.message_ints;
  const std::size_t message_bytes = static_cast<std::size_t>(mi) * 4;
  auto* received = reinterpret_cast<std::int32_t*>(region(m_mem_layout.recv_messages));
  LegPuts puts{};
  auto& put = puts[0];  // node n's message, to this node's slot at n
  put.src_window = put.dst_window = window_internode;
  put.src_offset = m_mem_layout.send_messages;
  put.src_node_stride = message_bytes;
  put.dst_offset = m_mem_layout.recv_messages + static_cast<std::uint64_t>(m_node) * message_bytes;
  put.bytes = message_bytes;
  EPKIT_TRY(leg_exchange(leg_messages, "dispatch (count messages)", puts, 1, sent, &mf));
  // Our own message (with its rows vector, written by the exchange) beside
  // the others, then the device's checked read of them all: the sizes stay
  // on the device, the host does not wait.
  if (cudaError_t rc = cudaMemcpyAsync(message(received, m_node), message(sent, m_node),
                                       message_bytes, cudaMemcpyDeviceToDevice, stream);
      rc != cudaSuccess)
    return m_local->failure(rc, "dispatch (count messages)");
  k::LegCountsParams lc;
  lc.received = received;
  lc.sent = sent;
  lc.place = k::RailPlace{m_node, m_nodes, m_per_node, m_local_rank};
  lc.format = mf;
  lc.message_ints = mi;
  lc.sequence = m_sequence;
  lc.max_tokens = m_opts.max_tokens;
  lc.max_topk = m_opts.max_topk;
  lc.out = handle.leg_counts;
  lc.mailbox = m_local->m_mailbox_dev;
  if (cudaError_t rc = k::launch_leg_counts(lc, stream); rc != cudaSuccess)
    return m_local->failure(rc, "dispatch (count messages' check)");
  return {};
}

Result<void> InternodeBuffer::exchange_buckets(const char* what, const k::RowFormat& f,
                                               const InternodeHandle& h, bool side,
                                               std::int32_t* done) {
  cudaStream_t stream = m_local->comm_stream();
  std::uint8_t* buckets = region(m_mem_layout.buckets);
  std::uint8_t* rows = region(m_mem_layout.rows);
  const std::int64_t bucket_stride = static_cast<std::int64_t>(m_opts.max_tokens) * f.pitch;
  auto span = [&](int n) { return static_cast<std::int64_t>(n) * f.pitch; };
  const auto own = static_cast<std::size_t>(m_node);
  if (on_leg()) {
    // Sized on the device from the checked counts: no host wait. The own
    // node's bucket is a copy to its segment, the others' land in place at
    // each node.
    const k::LegCounts* c = h.leg_counts;
    k::StageParams sp;
    sp.src = buckets + m_node * bucket_stride;
    sp.src_stride = f.pitch;
    sp.dst = rows;
    sp.row_bytes = f.pitch;
    sp.rows_from = &c->rows_to[own];
    sp.dst_row = &c->segment_begin[own];
    sp.num_blocks = 8;
    if (cudaError_t rc = k::launch_stage(sp, stream); rc != cudaSuccess)
      return m_local->failure(rc, fmt::format("{} (own node's bucket)", what));
    // In chunks, so that a forwarding overlapping the leg starts on the
    // first while the last is on the wire.
    LegPuts puts{};
    for (int i = 0; i < k::k_leg_chunks; ++i) {
      auto& put = puts[static_cast<std::size_t>(i)];
      put.src_window = put.dst_window = window_internode;
      put.src_offset = m_mem_layout.buckets;
      put.src_node_stride = static_cast<std::uint64_t>(bucket_stride);
      put.dst_offset = m_mem_layout.rows;
      put.rows = c->rows_to;
      put.dst_row = c->offset_at;
      put.row_bytes = static_cast<std::uint64_t>(f.pitch);
      put.chunk = i;
      put.chunks = k::k_leg_chunks;
      put.done = done;
    }
    return leg_exchange(leg_rows, what, puts, k::k_leg_chunks, nullptr, nullptr, side);
  }
  if (h.rows_to[own] > 0) {
    cudaError_t rc = cudaMemcpyAsync(
        rows + span(h.segment_begin[own]), buckets + m_node * bucket_stride,
        static_cast<std::size_t>(span(h.rows_to[own])), cudaMemcpyDeviceToDevice, stream);
    if (rc != cudaSuccess) return m_local->failure(rc, fmt::format("{} (own node's bucket)", what));
  }
  std::vector<Transfer> sends, receives;
  for (int n = 0; n < m_nodes; ++n) {
    const auto i = static_cast<std::size_t>(n);
    sends.push_back({n, buckets + n * bucket_stride, static_cast<std::size_t>(span(h.rows_to[i]))});
    receives.push_back(
        {n, rows + span(h.segment_begin[i]), static_cast<std::size_t>(span(h.rows_from[i]))});
  }
  auto peers = [&] { return h.peers_with_rows(m_node); };
  EPKIT_TRY(post(what, sends, receives, peers));
  return wait_network(what, peers);
}

Result<DispatchResult> InternodeBuffer::dispatch(const DispatchArgs& a) {
  EPKIT_TRY(a.config.validate());
  EPKIT_TRY(usable());
  EPKIT_TRY(check_internode_dispatch(a, m_ranks, m_opts));
  if (m_rings) return dispatch_rings(a);
  if (a.handle) return dispatch_cached(a, dynamic_cast<const InternodeHandle&>(*a.handle));
  const int tokens = static_cast<int>(a.x.rows());
  const int hidden = static_cast<int>(a.x.cols());
  const bool with_topk = given(a.topk_idx);
  const bool with_weights = given(a.topk_weights);
  const int num_topk = with_topk ? static_cast<int>(a.topk_idx.cols()) : 0;
  const int num_experts = static_cast<int>(a.num_tokens_per_expert.numel());
  const int experts_per_node = num_experts / m_nodes;
  const k::RowFormat f =
      row_format(a.x.dtype, hidden, with_topk ? static_cast<int>(dtype_size(a.topk_idx.dtype)) : 0,
                 num_topk, with_weights, m_per_node);
  cudaStream_t stream = m_local->comm_stream();
  EPKIT_TRY(m_local->enter(a.order));

  // The handle's device arrays: each token's row in every node's bucket, and
  // the global source rank prefix of what this rank receives.
  // On the leg, the checked counts too (k::LegCounts, ints only).
  void* memory = nullptr;
  const std::size_t counts_ints = on_leg() ? sizeof(k::LegCounts) / sizeof(int) : 0;
  const std::size_t ints =
      static_cast<std::size_t>(std::max(tokens, 1)) * m_nodes + m_ranks + counts_ints;
  if (cudaError_t rc = cudaMallocAsync(&memory, ints * sizeof(int), stream); rc != cudaSuccess)
    return m_local->failure(rc, "cudaMallocAsync of the dispatch handle");
  auto handle = std::make_shared<InternodeHandle>(memory, m_local->m_stream_owner);
  auto* node_send_row = static_cast<std::int32_t*>(memory);
  auto* gbl_prefix = node_send_row + static_cast<std::size_t>(std::max(tokens, 1)) * m_nodes;
  if (on_leg()) handle->leg_counts = reinterpret_cast<k::LegCounts*>(gbl_prefix + m_ranks);

  // 1. Plan: rows per node bucket and the count messages.
  m_sequence = m_sequence % 0x7ffffff0 + 1;
  auto* sent = reinterpret_cast<std::int32_t*>(region(m_mem_layout.send_messages));
  k::PlanParams pp;
  pp.is_token_in_rank = static_cast<const bool*>(a.is_token_in_rank.data);
  pp.is_token_in_rank_stride = a.is_token_in_rank.strides[0];
  pp.num_tokens_per_rank = static_cast<const std::int32_t*>(a.num_tokens_per_rank.data);
  pp.num_tokens_per_expert = static_cast<const std::int32_t*>(a.num_tokens_per_expert.data);
  pp.num_tokens = tokens;
  pp.num_nodes = m_nodes;
  pp.ranks_per_node = m_per_node;
  pp.experts_per_node = experts_per_node;
  pp.sequence = m_sequence;
  pp.send_row = node_send_row;
  pp.messages = sent;
  pp.message_ints = m_mem_layout.message_ints;
  // check_internode_dispatch made sure the message fits the slot.
  const k::MessageFormat mf{m_per_node, experts_per_node, m_nodes};
  if (cudaError_t rc = k::launch_plan(pp, stream); rc != cudaSuccess)
    return m_local->failure(rc, "dispatch (plan)");

  // 2. Pack every token into the bucket of each node it visits.
  std::uint8_t* buckets = region(m_mem_layout.buckets);
  const std::int64_t bucket_stride = static_cast<std::int64_t>(m_opts.max_tokens) * f.pitch;
  k::PackParams pk = pack_params(a, f, node_send_row, m_nodes, buckets, bucket_stride,
                                 on_leg() ? forward_number() : nullptr);
  pk.experts_per_node = experts_per_node;
  pk.with_routing = true;
  if (with_topk) {
    pk.topk = a.topk_idx.data;
    pk.topk_stride = a.topk_idx.strides[0];
  }
  if (with_weights) {
    pk.weights = static_cast<const float*>(a.topk_weights.data);
    pk.weights_stride = a.topk_weights.strides[0];
  }
  pk.is_token_in_rank = pp.is_token_in_rank;
  pk.is_token_in_rank_stride = pp.is_token_in_rank_stride;
  if (cudaError_t rc = k::launch_pack(pk, stream); rc != cudaSuccess)
    return m_local->failure(rc, "dispatch (pack)");

  // 3. Count messages over the rail: on the leg the device reads and keeps
  // the sizes; over NCCL the host needs them for step 4.
  const int mi = m_mem_layout.message_ints;
  const std::size_t message_bytes = static_cast<std::size_t>(mi) * 4;
  cudaError_t rc = cudaSuccess;
  if (on_leg()) {
    EPKIT_TRY(exchange_messages_on_leg(sent, mf, *handle));
  } else {
    auto* received = static_cast<std::int32_t*>(m_recv_messages.device());
    rc = cudaMemcpyAsync(message(received, m_node), message(sent, m_node), message_bytes,
                         cudaMemcpyDeviceToDevice, stream);
    if (rc == cudaSuccess)
      rc = cudaMemcpyAsync(m_sent_messages.device(), sent, message_bytes * m_nodes,
                           cudaMemcpyDeviceToDevice, stream);
    if (rc != cudaSuccess) return m_local->failure(rc, "dispatch (count messages)");
    std::vector<Transfer> sends, receives;
    for (int n = 0; n < m_nodes; ++n) {
      sends.push_back({n, message(sent, n), message_bytes});
      receives.push_back({n, message(received, n), message_bytes});
    }
    EPKIT_TRY(post("dispatch (count messages)", sends, receives, [&] { return others(); }));
    EPKIT_TRY(wait_messages(m_sequence));

    const auto* in = static_cast<const std::int32_t*>(m_recv_messages.host());
    const auto* out = static_cast<const std::int32_t*>(m_sent_messages.host());
    handle->rows_to.resize(static_cast<std::size_t>(m_nodes));
    handle->rows_from.resize(static_cast<std::size_t>(m_nodes));
    handle->segment_begin.assign(static_cast<std::size_t>(m_nodes) + 1, 0);
    for (int n = 0; n < m_nodes; ++n) {
      const auto i = static_cast<std::size_t>(n);
      handle->rows_to[i] = out[static_cast<std::int64_t>(n) * mi + mf.rows_at()];
      handle->rows_from[i] = in[static_cast<std::int64_t>(n) * mi + mf.rows_at()];
      if (handle->rows_from[i] < 0 || handle->rows_from[i] > m_opts.max_tokens)
        return invalid(fmt::format("dispatch: rank {} announced {} rows, more than max_tokens {}",
                                   n * m_per_node + m_local_rank, handle->rows_from[i],
                                   m_opts.max_tokens));
      handle->segment_begin[i + 1] = handle->segment_begin[i] + handle->rows_from[i];
    }
  }

  // 4. Buckets over the rail: node n's rows land as segment n.
  EPKIT_TRY(exchange_buckets("dispatch (buckets)", f, *handle));
  std::uint8_t* rows = region(m_mem_layout.rows);

  // 5. Forward over NVLink: the received rows are the node Buffer's tokens.
  const auto* received =
      on_leg() ? reinterpret_cast<const std::int32_t*>(region(m_mem_layout.recv_messages))
               : static_cast<const std::int32_t*>(m_recv_messages.device());
  // On the leg the rows received are known on the device only: the node
  // Buffer runs over their bound, its segments read there.
  const std::int64_t forwarded = on_leg() ? static_cast<std::int64_t>(m_nodes) * m_opts.max_tokens
                                          : handle->segment_begin.back();
  BufferImpl::Segments seg;
  seg.count = m_nodes;
  if (on_leg())
    seg.begin_device = handle->leg_counts->segment_begin;
  else
    std::copy(handle->segment_begin.begin(), handle->segment_begin.end(), seg.begin);
  seg.tokens_per_rank = received + mf.ranks_at();
  seg.rank_stride = mi;
  seg.tokens_per_expert = received + mf.experts_at();
  seg.expert_stride = mi;
  seg.num_experts = experts_per_node;
  seg.recv_gbl_prefix = gbl_prefix;
  DispatchArgs fa;
  fa.x = field(rows, f, 0, a.x.dtype, forwarded, hidden);
  if (f.num_scales > 0)
    fa.x_scales = field(rows, f, f.scales_offset, DType::fp32, forwarded, f.num_scales);
  if (with_topk) {
    fa.topk_idx = field(rows, f, f.topk_offset, a.topk_idx.dtype, forwarded, num_topk);
    if (with_weights)
      fa.topk_weights = field(rows, f, f.weights_offset, DType::fp32, forwarded, num_topk);
  }
  fa.is_token_in_rank = field(rows, f, f.mask_offset, DType::boolean, forwarded, m_per_node);
  fa.expert_alignment = a.expert_alignment;
  fa.num_worst_tokens = a.num_worst_tokens;
  fa.config = a.config;
  fa.order.stream = stream;
  fa.order.async = true;
  fa.order.want_event = false;
  auto result = m_local->dispatch_segments(fa, &seg);
  if (!result) return result.error();
  auto event = m_local->leave(a.order);
  if (!event) return event.error();

  handle->forward = result->handle;
  handle->num_tokens = tokens;
  handle->num_ranks = m_ranks;
  handle->hidden = hidden;
  handle->num_recv_tokens = result->handle->num_recv_tokens;
  handle->num_worst_tokens = a.num_worst_tokens;
  handle->num_nodes = m_nodes;
  handle->node_send_row = node_send_row;
  handle->send_row = TensorView::matrix(node_send_row, DType::int32, tokens, m_nodes);
  handle->rank_prefix_matrix = result->handle->rank_prefix_matrix;
  handle->recv_gbl_rank_prefix_sum = TensorView::vector(gbl_prefix, DType::int32, m_ranks);
  result->handle = std::move(handle);
  result->recv_src_idx = TensorView{};
  result->event = std::move(*event);
  return result;
}

Result<DispatchResult> InternodeBuffer::dispatch_cached(const DispatchArgs& a,
                                                        const InternodeHandle& h) {
  const int hidden = static_cast<int>(a.x.cols());
  const k::RowFormat f = row_format(a.x.dtype, hidden, 0, 0, false, m_per_node);
  cudaStream_t stream = m_local->comm_stream();
  EPKIT_TRY(m_local->enter(a.order));
  phase_mark(0);
  std::uint8_t* buckets = region(m_mem_layout.buckets);
  const std::int64_t bucket_stride = static_cast<std::int64_t>(m_opts.max_tokens) * f.pitch;
  k::PackParams pk = pack_params(a, f, h.node_send_row, m_nodes, buckets, bucket_stride,
                                 on_leg() ? forward_number() : nullptr);
  pk.with_routing = false;
  // Overlapped, the buckets cross on the leg's own stream, forked before the
  // pack: each chunk leaves once the pack has counted its rows, and the
  // node's Buffer forwards every chunk that landed (its own node's rows
  // first). The exchange is launched after the pack it waits on (the
  // launch-order rule at LegChunks in combine).
  const bool overlap = on_leg() && m_leg_overlap;
  auto* done = reinterpret_cast<std::int32_t*>(region(m_mem_layout.leg_done));
  if (overlap) {
    EPKIT_TRY(begin_side("cached dispatch"));
    pk.done = done;
    pk.rows_to = h.leg_counts->rows_to;
    pk.own_node = m_node;
    pk.chunks = k::k_leg_chunks;
  }
  // A failure after the fork joins the leg's stream back before returning:
  // a capture must not end with it apart.
  auto rejoin = [&](Error error) -> Error {
    if (overlap) (void)end_side("cached dispatch");
    return error;
  };
  if (cudaError_t rc = k::launch_pack(pk, stream); rc != cudaSuccess)
    return rejoin(m_local->failure(rc, "cached dispatch (pack)"));

  std::uint8_t* rows = region(m_mem_layout.rows);
  phase_mark(1);
  if (auto sent =
          exchange_buckets("cached dispatch (buckets)", f, h, overlap, overlap ? done : nullptr);
      !sent)
    return rejoin(sent.error());
  phase_mark(2);

  const std::int64_t forwarded = h.forward->num_tokens;
  DispatchArgs fa;
  fa.x = field(rows, f, 0, a.x.dtype, forwarded, hidden);
  if (f.num_scales > 0)
    fa.x_scales = field(rows, f, f.scales_offset, DType::fp32, forwarded, f.num_scales);
  fa.handle = h.forward;
  fa.config = a.config;
  fa.order.stream = stream;
  fa.order.async = true;
  fa.order.want_event = false;
  Result<DispatchResult> result = Error{};
  if (overlap) {
    k::LegChunks arrival = leg_chunks(h);
    arrival.signals = m_leg->device_leg().signals;
    arrival.first_signal = leg_signal_base(leg_rows) + static_cast<std::uint32_t>(m_nodes);
    arrival.signal_stride = k::LegExchangeParams::k_puts;
    arrival.number = forward_number();
    result = m_local->dispatch_arriving(fa, arrival);
    // Joined whatever happened: a capture must not end with the leg's
    // stream apart.
    auto joined = end_side("cached dispatch");
    if (result && !joined) return joined.error();
  } else {
    result = m_local->dispatch(fa);
  }
  phase_mark(3);
  if (!result) return result.error();
  auto event = m_local->leave(a.order);
  if (!event) return event.error();
  result->handle = a.handle;
  result->recv_src_idx = TensorView{};
  result->event = std::move(*event);
  return result;
}

}  // namespace epkit::ep
