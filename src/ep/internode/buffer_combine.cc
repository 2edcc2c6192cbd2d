// InternodeBuffer::combine: the reverse of a dispatch. Each forwarding rank
// sums, with the intranode combine, what its node's ranks hold for every row
// it received; the partial sums go back over the rail in bucket order; each
// rank adds its tokens' partials in node order (reduce.cu).
#include <fmt/format.h>

#include "ep/internode/buffer.h"
#include "ep/internode/checks.h"

namespace epkit::ep {

Result<CombineResult> InternodeBuffer::combine(const CombineArgs& a) {
  EPKIT_TRY(a.config.validate());
  EPKIT_TRY(usable());
  EPKIT_TRY(check_internode_combine(a, m_ranks));
  const auto* h = dynamic_cast<const InternodeHandle*>(a.handle.get());
  if (m_rings) return combine_rings(a, *h);
  const int hidden = static_cast<int>(a.x.cols());
  cudaStream_t stream = m_local->comm_stream();
  EPKIT_TRY(m_local->enter(a.order));

  // On the leg the sums cross on the leg's own stream, each chunk as soon as
  // the node combine has written it (LegChunks departure).
  const bool overlap = on_leg() && m_leg_overlap;
  if (overlap) EPKIT_TRY(begin_side("combine"));
  phase_mark(0);

  // 1. The node's sums for every forwarded row, in the forwarder's row order.
  CombineArgs local;
  local.x = a.x;
  local.topk_weights = a.topk_weights;
  local.handle = h->forward;
  local.config = a.config;
  local.order.stream = stream;
  local.order.async = true;
  local.order.want_event = false;
  const bool with_weights = given(a.topk_weights);
  const int num_topk = with_weights ? static_cast<int>(a.topk_weights.cols()) : 0;
  // Where the node combine leaves its sums (the partial puts read them).
  auto* sums = m_local->combined_x();
  auto* sums_w = with_weights ? m_local->combined_weights() : nullptr;
  auto* done = reinterpret_cast<std::int32_t*>(region(m_mem_layout.leg_done));
  auto* partials = reinterpret_cast<std::uint16_t*>(region(m_mem_layout.partial_x));
  auto* partials_w = reinterpret_cast<float*>(region(m_mem_layout.partial_w));
  const std::int64_t x_row = hidden;
  const std::int64_t capacity = m_opts.max_tokens;
  auto exchange_partials = [&]() -> Result<void> {
    // Into node n's partials from this node, straight from the node
    // combine's output (the node-local window), sized on the device from the
    // dispatch's checked counts: the sums in chunks, each leaving once
    // written, then the weights (or a bare signal).
    const k::LegCounts* c = h->leg_counts;
    auto partial_put = [&](const void* sums_base, std::size_t region, std::size_t row_bytes) {
      k::LegPut put;
      put.src_window = window_node_local;
      put.dst_window = window_internode;
      put.src_offset = node_local_offset(sums_base);
      put.dst_offset = region + static_cast<std::uint64_t>(m_node * capacity) * row_bytes;
      put.rows = c->rows_from;
      put.src_row = c->segment_begin;
      put.row_bytes = row_bytes;
      return put;
    };
    LegPuts puts{};
    for (int i = 0; i < k::k_leg_chunks; ++i) {
      auto& put = puts[static_cast<std::size_t>(i)];
      put = partial_put(sums, m_mem_layout.partial_x, static_cast<std::size_t>(x_row) * 2);
      put.chunk = i;
      put.chunks = k::k_leg_chunks;
      put.done = done;
    }
    if (with_weights)
      puts[k::k_leg_chunks] =
          partial_put(sums_w, m_mem_layout.partial_w, static_cast<std::size_t>(num_topk) * 4);
    return leg_exchange(leg_partials, "combine (partial sums)", puts, k::k_leg_chunks + 1, nullptr,
                        nullptr, overlap);
  };
  k::LegChunks departure;
  if (on_leg()) {
    departure = leg_chunks(*h);
    departure.done = done;
  }
  // The exchange waits for each chunk the node combine counts, so it is
  // launched after the node combine, never before: a kernel that waits on
  // one this thread has not launched yet deadlocks whenever the launch
  // itself waits for the running kernels (CUDA's lazy loading of a kernel's
  // module on its first launch does, as do cudaMalloc and cudaFree).
  // Overlapped, it runs on the leg's stream, forked before the node combine.
  auto partial = m_local->combine_departing(local, on_leg() ? &departure : nullptr);
  phase_mark(1);
  if (on_leg() && partial) {
    auto exchanged = exchange_partials();
    if (!exchanged) partial = exchanged.error();
  }
  phase_mark(2);
  // Overlapped, the reduce below runs beside the exchange (each token waits
  // for its own chunks) and the leg's stream joins after it. Joined
  // whatever happens: a capture must not end with the leg's stream apart.
  bool joined = !overlap;
  auto join = [&]() -> Result<void> {
    if (joined) return {};
    joined = true;
    return end_side("combine");
  };
  if (!partial) {
    (void)join();
    return partial.error();
  }
  if (partial->combined_x.data != sums ||
      (with_weights && partial->combined_topk_weights.data != sums_w)) {
    (void)join();
    return make_error(ErrorCode::internal,
                      "combine: the node combine left its sums elsewhere than the leg reads them");
  }

  // 2. Segment n of the sums goes back to node n (on the leg: above); this
  // rank's bucket rows come back from every node.
  std::vector<Transfer> sends, receives;
  k::ReduceParams rp;
  for (int n = 0; n < m_nodes; ++n) {
    const auto i = static_cast<std::size_t>(n);
    std::uint16_t* in_x = partials + n * capacity * x_row;
    float* in_w = partials_w + n * capacity * num_topk;
    if (on_leg()) {
      // This node's partials are read where the node combine left them.
      rp.partial_x[n] = n == m_node ? sums : in_x;
      rp.partial_w[n] = n == m_node ? sums_w : in_w;
      if (n == m_node) rp.first_row[n] = &h->leg_counts->segment_begin[i];
      continue;
    }
    const std::int64_t first = h->segment_begin[i];
    const auto from = static_cast<std::size_t>(h->rows_from[i]);
    const auto to = static_cast<std::size_t>(h->rows_to[i]);
    sends.push_back({n, sums + first * x_row, from * static_cast<std::size_t>(x_row) * 2});
    receives.push_back({n, in_x, to * static_cast<std::size_t>(x_row) * 2});
    if (with_weights) {
      sends.push_back(
          {n, sums_w + first * num_topk, from * static_cast<std::size_t>(num_topk) * 4});
      receives.push_back({n, in_w, to * static_cast<std::size_t>(num_topk) * 4});
    }
    // This node's partials are read where the node combine left them.
    rp.partial_x[n] = n == m_node ? sums + first * x_row : in_x;
    rp.partial_w[n] =
        n == m_node ? (sums_w != nullptr ? sums_w + first * num_topk : nullptr) : in_w;
  }
  // On the leg no host wait: the reduce follows the exchange's device waits.
  if (!on_leg()) {
    auto peers = [&] { return h->peers_with_rows(m_node); };
    EPKIT_TRY(post("combine (partial sums)", sends, receives, peers));
    EPKIT_TRY(wait_network("combine (partial sums)", peers));
  }

  // 3. Each token: the biases, then its partials in node order.
  // The caller's memory when given: the reduce writes the result there.
  auto* out_x = given(a.out_x) ? static_cast<std::uint16_t*>(a.out_x.data)
                               : reinterpret_cast<std::uint16_t*>(region(m_mem_layout.out_x));
  auto* out_w = given(a.out_topk_weights) ? static_cast<float*>(a.out_topk_weights.data)
                                          : reinterpret_cast<float*>(region(m_mem_layout.out_w));
  rp.send_row = h->node_send_row;
  rp.num_tokens = h->num_tokens;
  rp.num_nodes = m_nodes;
  rp.hidden = hidden;
  rp.num_topk = num_topk;
  for (int b = 0; b < 2; ++b) {
    const TensorView& bias = a.bias[static_cast<std::size_t>(b)];
    if (!given(bias)) continue;
    rp.bias[b] = static_cast<const std::uint16_t*>(bias.data);
    rp.bias_stride[b] = bias.strides[0];
  }
  rp.out_x = out_x;
  rp.out_w = with_weights ? out_w : nullptr;
  rp.num_blocks = a.config.num_sms;
  rp.num_warps = a.config.num_warps;
  if (on_leg()) {
    // The reduce counts combines on the leg in every call; overlapped, each
    // token also waits for its partials' chunks (in turn, the exchange ran
    // before on this stream and nothing is waited for).
    rp.number = reduce_number();
  }
  if (overlap) {
    rp.signals = m_leg->device_leg().signals;
    rp.first_signal = leg_signal_base(leg_partials) + static_cast<std::uint32_t>(m_nodes);
    rp.signal_stride = k::LegExchangeParams::k_puts;
    rp.rows_to = h->leg_counts->rows_to;
    rp.own_node = m_node;
    rp.chunks = k::k_leg_chunks;
    rp.timeout_ns = static_cast<std::int64_t>(m_opts.timeout_s * 1e9);
    rp.exited = m_leg->device_leg().exited;
    rp.ranks_per_node = m_per_node;
    rp.local_rank = m_local_rank;
    rp.mailbox = m_local->m_mailbox_dev;
  }
  cudaError_t reduced = k::launch_reduce(rp, stream);
  auto rejoined = join();
  if (reduced != cudaSuccess) return m_local->failure(reduced, "combine (reduce over nodes)");
  if (!rejoined) return rejoined.error();
  phase_mark(3);
  auto event = m_local->leave(a.order);
  if (!event) return event.error();
  CombineResult out;
  out.combined_x = TensorView::matrix(out_x, DType::bf16, h->num_tokens, hidden);
  if (with_weights)
    out.combined_topk_weights = TensorView::matrix(out_w, DType::fp32, h->num_tokens, num_topk);
  out.event = std::move(*event);
  return out;
}

}  // namespace epkit::ep
