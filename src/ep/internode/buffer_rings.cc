// InternodeBuffer in ring mode (BufferOptions::internode_rings; kernels in
// ring_kernels.h, design in docs/ep-internode.md, "Ring mode"): the count
// phase, then one kernel per operation streaming rows through the rings
// into outputs allocated per call. A dispatch with num_worst_tokens, a
// cached dispatch and a combine never wait on the host; a plain dispatch
// waits once, for the count phase, to size its outputs (as DeepEP's).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "ep/internode/buffer.h"

namespace epkit::ep {

namespace {

std::size_t up16(std::size_t v) {
  return (v + 255) / 256 * 256;
}

}  // namespace

Result<void> InternodeBuffer::init_rings() {
  // Counters and NVLink rings start at zero on every rank before any peer
  // can write (the leg's handle exchange, after this, is collective).
  if (cudaError_t rc =
          cudaMemset(region(m_ring.net_sent), 0, m_ring.counters_end - m_ring.net_sent);
      rc != cudaSuccess)
    return cuda_error(rc, "cudaMemset of the rings' counters");
  const Region arena = m_local->output_arena();
  if (arena.data == nullptr || arena.bytes < m_ring.nvl_bytes)
    return make_error(ErrorCode::internal,
                      "ring mode: the node Buffer has no room for the NVLink rings");
  if (cudaError_t rc = cudaMemset(arena.data, 0, m_ring.nvl_bytes); rc != cudaSuccess)
    return cuda_error(rc, "cudaMemset of the NVLink rings");
  if (cudaError_t rc = cudaDeviceSynchronize(); rc != cudaSuccess)
    return cuda_error(rc, "cudaDeviceSynchronize after zeroing the rings");
  auto totals =
      MappedMemory::allocate((2 + static_cast<std::size_t>(m_ring.max_experts_per_rank)) * 4);
  if (!totals) return totals.error();
  m_ring_totals = std::move(*totals);
  return {};
}

k::RingShape InternodeBuffer::ring_shape(int experts_per_rank) const {
  k::RingShape s = m_ring.shape;
  s.node = m_node;
  s.local = m_local_rank;
  s.experts_per_rank = experts_per_rank;
  return s;
}

Result<void> InternodeBuffer::wait_stream(const char* what) {
  cudaStream_t stream = m_local->comm_stream();
  if (cudaError_t rc = cudaEventRecord(m_net_done, stream); rc != cudaSuccess)
    return m_local->failure(rc, what);
  // The kernels give up at 2 x timeout + 1 s at the latest (NVLink waits).
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<long long>((3 * m_opts.timeout_s + 2) * 1000));
  for (;;) {
    const cudaError_t rc = cudaEventQuery(m_net_done);
    if (rc == cudaSuccess) return {};
    if (rc != cudaErrorNotReady) return m_local->failure(rc, what);
    if (std::chrono::steady_clock::now() > deadline) {
      m_broken = true;
      return make_error(ErrorCode::timeout,
                        fmt::format("{}: this rank's kernels did not end within {} s, past their "
                                    "own bounds ({})",
                                    what, 3 * m_opts.timeout_s + 2, leg_note()));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

Result<DispatchResult> InternodeBuffer::dispatch_rings(const DispatchArgs& a) {
  const bool cached = a.handle != nullptr;
  const auto* parent = cached ? dynamic_cast<const InternodeHandle*>(a.handle.get()) : nullptr;
  if (cached && (parent == nullptr || !parent->rings))
    return invalid("dispatch: the handle is not from this ring-mode Buffer's dispatch");
  const int tokens = static_cast<int>(a.x.rows());
  const int hidden = static_cast<int>(a.x.cols());
  if (cached && tokens != parent->num_tokens)
    return invalid(fmt::format("dispatch: x has {} tokens, the handle's dispatch had {}", tokens,
                               parent->num_tokens));
  const bool with_topk = !cached && given(a.topk_idx);
  const bool with_weights = with_topk && given(a.topk_weights);
  const int num_topk = with_topk ? static_cast<int>(a.topk_idx.cols()) : 0;
  const int topk_size = with_topk ? static_cast<int>(dtype_size(a.topk_idx.dtype)) : 0;
  const int experts = cached ? parent->experts_per_rank * m_ranks
                             : static_cast<int>(a.num_tokens_per_expert.numel());
  const int epr = experts / m_ranks;
  if (!cached && (experts % m_ranks != 0 || epr > m_ring.max_experts_per_rank))
    return invalid(fmt::format(
        "dispatch: {} experts on {} ranks; ring mode takes a multiple of the ranks, at most {} "
        "a rank",
        experts, m_ranks, m_ring.max_experts_per_rank));
  const k::RowFormat f =
      row_format(a.x.dtype, hidden, topk_size, num_topk, with_weights, m_per_node);
  if (f.pitch > m_ring.shape.slot_pitch)
    return invalid(fmt::format("dispatch: a row of {} bytes does not fit the rings' {}", f.pitch,
                               m_ring.shape.slot_pitch));
  cudaStream_t stream = m_local->comm_stream();
  EPKIT_TRY(m_local->enter(a.order));
  const k::RingShape s = ring_shape(epr);
  const network_leg::DeviceLeg leg = m_leg->device_leg();
  const k::RingCounters counters = ring_counters(m_ring, region(0));
  const int R = m_ranks;
  const int N = m_nodes;
  const int C = s.channels;

  std::shared_ptr<InternodeHandle> handle;
  k::RingRoutes routes;
  int rows = 0;
  std::vector<int> per_expert;
  if (!cached) {
    // The routes: ints, then the masks (a byte per stream row).
    const std::size_t ints = static_cast<std::size_t>(std::max(tokens, 1)) * N +
                             static_cast<std::size_t>(C + 1) * N * 2 +
                             static_cast<std::size_t>(C) * N + static_cast<std::size_t>(R) * C * 2 +
                             1 + R + static_cast<std::size_t>(std::max(epr, 1));
    const std::size_t mask_bytes = static_cast<std::size_t>(N) * m_opts.max_tokens;
    void* memory = nullptr;
    if (cudaError_t rc = cudaMallocAsync(&memory, ints * 4 + mask_bytes, stream); rc != cudaSuccess)
      return m_local->failure(rc, "cudaMallocAsync of the dispatch handle");
    handle = std::make_shared<InternodeHandle>(memory, m_local->m_stream_owner);
    auto* at = static_cast<std::int32_t*>(memory);
    auto take = [&](std::size_t n) {
      std::int32_t* here = at;
      at += n;
      return here;
    };
    routes.send_row = take(static_cast<std::size_t>(std::max(tokens, 1)) * N);
    routes.chan_first = take(static_cast<std::size_t>(C + 1) * N);
    routes.stream = take(static_cast<std::size_t>(C) * N);
    routes.stream_first = take(static_cast<std::size_t>(C + 1) * N);
    routes.from_rank = take(static_cast<std::size_t>(R) * C);
    routes.base = take(static_cast<std::size_t>(R) * C + 1);
    routes.gbl_prefix = take(static_cast<std::size_t>(R));
    routes.per_expert = take(static_cast<std::size_t>(std::max(epr, 1)));
    routes.mask = reinterpret_cast<std::uint8_t*>(at);
    routes.num_tokens = tokens;

    k::RingNotifyParams np;
    np.shape = s;
    np.leg = leg;
    np.counters = counters;
    np.routes = routes;
    np.is_token_in_rank = static_cast<const bool*>(a.is_token_in_rank.data);
    np.in_rank_stride = a.is_token_in_rank.strides[0];
    np.num_tokens_per_expert = static_cast<const std::int32_t*>(a.num_tokens_per_expert.data);
    np.window = region(0);
    np.num_tokens = tokens;
    np.expert_alignment = a.expert_alignment;
    np.num_worst_tokens = a.num_worst_tokens;
    np.recv_tokens_per_expert = routes.per_expert;
    const bool sizes = a.num_worst_tokens == 0;
    if (sizes) np.host_totals = static_cast<volatile std::int32_t*>(m_ring_totals.device());
    np.timeout_ns = static_cast<std::int64_t>(m_opts.timeout_s * 1e9);
    np.mailbox = m_local->m_mailbox_dev;
    if (cudaError_t rc = k::launch_ring_notify(np, stream); rc != cudaSuccess)
      return m_local->failure(rc, "dispatch (count messages)");
    if (sizes) {
      EPKIT_TRY(wait_stream("dispatch (count messages)"));
      const auto* totals = static_cast<const volatile std::int32_t*>(m_ring_totals.host());
      rows = totals[0];
      per_expert.assign(static_cast<std::size_t>(epr), 0);
      for (int e = 0; e < epr; ++e) per_expert[static_cast<std::size_t>(e)] = totals[2 + e];
    } else {
      rows = a.num_worst_tokens;
    }
    handle->rings = true;
    handle->routes = routes;
    handle->rows = rows;
    handle->experts_per_rank = epr;
  } else {
    routes = parent->routes;
    rows = parent->rows;
    handle = std::make_shared<InternodeHandle>(nullptr, m_local->m_stream_owner);
    handle->rings = true;
    handle->routes = routes;
    handle->rows = rows;
    handle->experts_per_rank = parent->experts_per_rank;
    handle->parent = std::static_pointer_cast<const InternodeHandle>(a.handle);
  }

  // This call's outputs, owned by its handle.
  const std::size_t r = static_cast<std::size_t>(std::max(rows, 1));
  const std::size_t x_bytes = up16(r * static_cast<std::size_t>(f.x_bytes));
  const std::size_t scale_bytes = up16(r * static_cast<std::size_t>(f.num_scales) * 4);
  const std::size_t topk_bytes = up16(r * static_cast<std::size_t>(num_topk) * topk_size);
  const std::size_t weight_bytes =
      with_weights ? up16(r * static_cast<std::size_t>(num_topk) * 4) : 0;
  void* outputs = nullptr;
  if (cudaError_t rc =
          cudaMallocAsync(&outputs, x_bytes + scale_bytes + topk_bytes + weight_bytes, stream);
      rc != cudaSuccess)
    return m_local->failure(rc, "cudaMallocAsync of the dispatch's outputs");
  handle->set_outputs(outputs);
  auto* out = static_cast<std::uint8_t*>(outputs);

  k::RingDispatchParams dp;
  dp.shape = s;
  dp.leg = leg;
  dp.counters = counters;
  dp.routes = routes;
  dp.format = f;
  dp.cached = cached;
  dp.window = region(0);
  for (int j = 0; j < m_per_node; ++j) dp.nvl[j] = m_local->m_peers[j] + m_local->m_heap.arena;
  dp.x = static_cast<const std::uint8_t*>(a.x.data);
  dp.x_stride = a.x.strides[0] * static_cast<std::int64_t>(dtype_size(a.x.dtype));
  if (f.num_scales > 0) {
    dp.scales = static_cast<const float*>(a.x_scales.data);
    dp.scale_stride_token = a.x_scales.strides[0];
    dp.scale_stride_hidden = a.x_scales.strides[1];
  }
  if (with_topk) {
    dp.topk = a.topk_idx.data;
    dp.topk_stride = a.topk_idx.strides[0];
  }
  if (with_weights) {
    dp.weights = static_cast<const float*>(a.topk_weights.data);
    dp.weights_stride = a.topk_weights.strides[0];
  }
  if (!cached) {
    dp.is_token_in_rank = static_cast<const bool*>(a.is_token_in_rank.data);
    dp.in_rank_stride = a.is_token_in_rank.strides[0];
  }
  dp.recv_x = out;
  dp.recv_scales = f.num_scales > 0 ? reinterpret_cast<float*>(out + x_bytes) : nullptr;
  dp.recv_topk = with_topk ? out + x_bytes + scale_bytes : nullptr;
  dp.recv_weights =
      with_weights ? reinterpret_cast<float*>(out + x_bytes + scale_bytes + topk_bytes) : nullptr;
  dp.num_worst_tokens = cached ? 0 : a.num_worst_tokens;
  dp.timeout_ns = static_cast<std::int64_t>(m_opts.timeout_s * 1e9);
  dp.nvl_timeout_ns = static_cast<std::int64_t>((2 * m_opts.timeout_s + 1) * 1e9);
  dp.mailbox = m_local->m_mailbox_dev;
  dp.profile = m_ring_profile;
  if (cached) {
    if (cudaError_t rc = k::launch_ring_notify_alive(leg, dp.mailbox, stream); rc != cudaSuccess)
      return m_local->failure(rc, "dispatch (notify)");
  }
  if (cudaError_t rc = k::launch_ring_dispatch(dp, stream); rc != cudaSuccess)
    return m_local->failure(rc, "dispatch (rings)");
  auto event = m_local->leave(a.order);
  if (!event) return event.error();

  DispatchResult result;
  result.recv_x = TensorView::matrix(out, a.x.dtype, rows, hidden);
  if (f.num_scales > 0)
    result.recv_x_scales = TensorView::matrix(dp.recv_scales, DType::fp32, rows, f.num_scales);
  if (with_topk)
    result.recv_topk_idx = TensorView::matrix(dp.recv_topk, a.topk_idx.dtype, rows, num_topk);
  if (with_weights)
    result.recv_topk_weights = TensorView::matrix(dp.recv_weights, DType::fp32, rows, num_topk);
  if (!cached && a.num_worst_tokens == 0) result.num_recv_tokens_per_expert = per_expert;
  if (!cached)
    result.recv_tokens_per_expert = TensorView::vector(routes.per_expert, DType::int32, epr);
  handle->num_tokens = tokens;
  handle->num_ranks = m_ranks;
  handle->hidden = hidden;
  const bool sized = cached ? parent->num_recv_tokens >= 0 : a.num_worst_tokens == 0;
  handle->num_recv_tokens = sized ? rows : -1;
  handle->num_worst_tokens = cached ? parent->num_worst_tokens : a.num_worst_tokens;
  handle->num_nodes = m_nodes;
  handle->node_send_row = routes.send_row;
  handle->send_row = TensorView::matrix(routes.send_row, DType::int32, tokens, m_nodes);
  handle->recv_gbl_rank_prefix_sum = TensorView::vector(routes.gbl_prefix, DType::int32, m_ranks);
  result.handle = std::move(handle);
  result.event = std::move(*event);
  return result;
}

Result<CombineResult> InternodeBuffer::combine_rings(const CombineArgs& a,
                                                     const InternodeHandle& h) {
  if (!h.rings) return invalid("combine: the handle is not from this ring-mode Buffer's dispatch");
  const int hidden = static_cast<int>(a.x.cols());
  const bool with_weights = given(a.topk_weights);
  const int num_topk = with_weights ? static_cast<int>(a.topk_weights.cols()) : 0;
  if (a.x.rows() < h.rows)
    return invalid(
        fmt::format("combine: x has {} rows, the dispatch received {}", a.x.rows(), h.rows));
  if (with_weights && a.topk_weights.rows() < h.rows)
    return invalid(fmt::format("combine: topk_weights has {} rows, the dispatch received {}",
                               a.topk_weights.rows(), h.rows));
  const int row_bytes = static_cast<int>((hidden * 2 + num_topk * 4 + 15) / 16 * 16);
  if (hidden % 8 != 0 || row_bytes > m_ring.shape.slot_pitch || hidden > m_opts.max_hidden ||
      num_topk > m_opts.max_topk)
    return invalid(fmt::format(
        "combine: hidden {} and top-{} weights do not fit the rings (hidden a multiple of 8, at "
        "most {}, top-k at most {})",
        hidden, num_topk, m_opts.max_hidden, m_opts.max_topk));
  cudaStream_t stream = m_local->comm_stream();
  EPKIT_TRY(m_local->enter(a.order));
  auto* out_x = given(a.out_x) ? static_cast<std::uint16_t*>(a.out_x.data)
                               : reinterpret_cast<std::uint16_t*>(region(m_ring.out_x));
  auto* out_w = given(a.out_topk_weights) ? static_cast<float*>(a.out_topk_weights.data)
                                          : reinterpret_cast<float*>(region(m_ring.out_w));
  k::RingCombineParams cp;
  cp.shape = ring_shape(h.experts_per_rank);
  cp.leg = m_leg->device_leg();
  cp.counters = ring_counters(m_ring, region(0));
  cp.routes = h.routes;
  cp.window = region(0);
  for (int j = 0; j < m_per_node; ++j) cp.nvl[j] = m_local->m_peers[j] + m_local->m_heap.arena;
  cp.hidden = hidden;
  cp.num_topk = num_topk;
  cp.row_bytes = row_bytes;
  cp.x = static_cast<const std::uint16_t*>(a.x.data);
  cp.x_stride = a.x.strides[0];
  if (with_weights) {
    cp.weights = static_cast<const float*>(a.topk_weights.data);
    cp.weights_stride = a.topk_weights.strides[0];
  }
  for (int b = 0; b < 2; ++b) {
    const TensorView& bias = a.bias[static_cast<std::size_t>(b)];
    if (!given(bias)) continue;
    cp.bias[b] = static_cast<const std::uint16_t*>(bias.data);
    cp.bias_stride[b] = bias.strides[0];
  }
  cp.out_x = out_x;
  cp.out_w = with_weights ? out_w : nullptr;
  cp.timeout_ns = static_cast<std::int64_t>(m_opts.timeout_s * 1e9);
  cp.nvl_timeout_ns = static_cast<std::int64_t>((2 * m_opts.timeout_s + 1) * 1e9);
  cp.mailbox = m_local->m_mailbox_dev;
  cp.profile = m_ring_profile;
  if (cudaError_t rc = k::launch_ring_notify_alive(cp.leg, cp.mailbox, stream); rc != cudaSuccess)
    return m_local->failure(rc, "combine (notify)");
  if (cudaError_t rc = k::launch_ring_combine(cp, stream); rc != cudaSuccess)
    return m_local->failure(rc, "combine (rings)");
  auto event = m_local->leave(a.order);
  if (!event) return event.error();
  CombineResult out;
  out.combined_x = TensorView::matrix(out_x, DType::bf16, h.num_tokens, hidden);
  if (with_weights)
    out.combined_topk_weights = TensorView::matrix(out_w, DType::fp32, h.num_tokens, num_topk);
  out.event = std::move(*event);
  return out;
}

Result<void*> InternodeBuffer::ring_stage(DeviceMemory& stage, std::size_t bytes) {
  if (stage.get() != nullptr && stage.size() >= bytes) return stage.get();
  // A combine queued on the old staging may still read it.
  if (cudaError_t rc = cudaStreamSynchronize(m_local->comm_stream()); rc != cudaSuccess)
    return m_local->failure(rc, "combine_input (the Buffer's stream)");
  stage = DeviceMemory{};
  auto grown = DeviceMemory::allocate(std::max<std::size_t>(bytes, 256));
  if (!grown) return grown.error();
  stage = std::move(*grown);
  return stage.get();
}

Result<TensorView> InternodeBuffer::combine_input(std::int64_t rows, std::int64_t hidden) {
  if (!m_rings) return m_local->combine_input(rows, hidden);
  const std::int64_t most = static_cast<std::int64_t>(m_ranks) * m_opts.max_tokens;
  if (rows < 0 || rows > most || hidden <= 0 || hidden > m_opts.max_hidden || hidden % 8 != 0)
    return invalid(
        fmt::format("combine_input: [{}, {}] must fit [{}, {}] with hidden a multiple "
                    "of 8",
                    rows, hidden, most, m_opts.max_hidden));
  auto at = ring_stage(m_stage_x, static_cast<std::size_t>(rows * hidden) * 2);
  if (!at) return at.error();
  return TensorView::matrix(*at, DType::bf16, rows, hidden);
}

Result<TensorView> InternodeBuffer::combine_weights_input(std::int64_t rows, std::int64_t topk) {
  if (!m_rings) return m_local->combine_weights_input(rows, topk);
  const std::int64_t most = static_cast<std::int64_t>(m_ranks) * m_opts.max_tokens;
  if (rows < 0 || rows > most || topk < 1 || topk > m_opts.max_topk)
    return invalid(fmt::format("combine_weights_input: [{}, {}] must fit [{}, {}]", rows, topk,
                               most, m_opts.max_topk));
  auto at = ring_stage(m_stage_w, static_cast<std::size_t>(rows * topk) * 4);
  if (!at) return at.error();
  return TensorView::matrix(*at, DType::fp32, rows, topk);
}

}  // namespace epkit::ep
