// InternodeBuffer's low-latency mode (docs/ep-engine.md, "Across nodes, and a
// send half that never waits"): the node's Buffer runs the operations over
// every rank of the job. Ranks of this node are reached through its NVLink
// mappings (DeepEP's allow_nvlink_for_low_latency_mode), the others through
// the device-driven leg, whose third window is every rank's low-latency
// region. The kernels are the node Buffer's (src/ep/low_latency/); this file
// gives them the world.
#include <fmt/format.h>

#include <algorithm>

#include "ep/internode/buffer.h"
#include "ep/low_latency/kernels.h"

namespace epkit::ep {

Result<void> InternodeBuffer::init_low_latency() {
  if (m_opts.low_latency_bytes == 0) return {};
  if (m_ranks > k::k_low_latency_max_ranks)
    return make_error(ErrorCode::invalid,
                      fmt::format("BufferOptions.low_latency_bytes: the low-latency mode spans at "
                                  "most {} ranks, this Buffer has {}",
                                  k::k_low_latency_max_ranks, m_ranks));
  std::uint8_t* region = m_local->m_peers[m_local->m_rank] + m_local->m_heap.low_latency;
  auto window = m_leg->register_window(region, m_opts.low_latency_bytes);
  if (!window) return window.error();
  if (window->value != window_low_latency)
    return make_error(ErrorCode::internal, "the network leg numbered the Buffer's windows apart");
  const std::size_t sent_bytes = static_cast<std::size_t>(k::low_latency_sent_words(m_ranks)) * 8;
  auto sent = DeviceMemory::allocate(sent_bytes);
  if (!sent) return sent.error();
  m_low_latency_sent = std::move(*sent);
  // The leg's signals start at 0, and so do the counts of what was sent.
  if (cudaError_t rc = cudaMemset(m_low_latency_sent.get(), 0, sent_bytes); rc != cudaSuccess)
    return cuda_error(rc, "cudaMemset of the low-latency running counts");
  m_local->m_low_latency_ranks = m_ranks;
  m_local->m_low_latency_world = [this](k::LowLatencyCommon& c) {
    c.rank = m_rank;
    c.num_ranks = m_ranks;
    std::fill(std::begin(c.base), std::end(c.base), nullptr);
    const int first = m_node * m_per_node;
    for (int r = 0; r < m_per_node; ++r)
      c.base[first + r] = m_local->m_peers[r] + m_local->m_heap.low_latency;
    c.net.on = true;
    c.net.leg = m_leg->device_leg();
    c.net.window = network_leg::WindowId{window_low_latency};
    c.net.signal_base = m_low_latency_signals;
    c.net.sent = static_cast<std::uint64_t*>(m_low_latency_sent.get());
  };
  return {};
}

Result<void> InternodeBuffer::low_latency_usable(const char* op) const {
  // The caller's choice of leg, not a fault of the node: `invalid`, which
  // the GPU commands report as a usage error.
  if (!on_leg())
    return make_error(
        ErrorCode::invalid,
        fmt::format("{}: the low-latency mode across nodes needs the device-driven network leg "
                    "(its kernels put every row themselves); this Buffer's leg is NCCL's host "
                    "API, which moves only transfers the host posts (BufferOptions.network_leg: "
                    "emulated_nic on faked nodes; see docs/ep-engine.md)",
                    op));
  EPKIT_TRY(usable());
  if (auto fault = m_leg->fault())
    return make_error(ErrorCode::unavailable,
                      fmt::format("{}: the network leg failed before (rank {}: {})", op,
                                  fault->rank, fault->reason));
  return {};
}

Result<LowLatencyDispatchResult> InternodeBuffer::low_latency_dispatch(
    const LowLatencyDispatchArgs& args) {
  EPKIT_TRY(low_latency_usable("low_latency_dispatch"));
  return m_local->low_latency_dispatch(args);
}

Result<LowLatencyCombineResult> InternodeBuffer::low_latency_combine(
    const LowLatencyCombineArgs& args) {
  EPKIT_TRY(low_latency_usable("low_latency_combine"));
  return m_local->low_latency_combine(args);
}

Result<TensorView> InternodeBuffer::get_next_low_latency_combine_buffer(
    const LowLatencyHandle& handle) {
  EPKIT_TRY(low_latency_usable("get_next_low_latency_combine_buffer"));
  return m_local->get_next_low_latency_combine_buffer(handle);
}

Result<void> InternodeBuffer::clean_low_latency_buffer(int num_max_dispatch_tokens_per_rank,
                                                       int hidden, int num_experts) {
  EPKIT_TRY(low_latency_usable("clean_low_latency_buffer"));
  // Every rank of every node past its last operation before any zeroes its
  // words, and every rank zeroed before any sends again: the node Buffer's
  // clean has node barriers only.
  EPKIT_TRY(barrier());
  EPKIT_TRY(
      m_local->clean_low_latency_buffer(num_max_dispatch_tokens_per_rank, hidden, num_experts));
  return barrier();
}

}  // namespace epkit::ep
