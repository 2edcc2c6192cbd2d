// The low-latency mode's host side that dispatch and combine share: the
// region a call's shape needs, the launch of one half (send or receive) in
// the Buffer's stream order, the receive hook, the zero-copy buffer, the
// clean, and the refusals of Buffers without the mode.
#include <fmt/format.h>

#include "ep/intranode/buffer.h"
#include "ep/low_latency/checks.h"
#include "ep/low_latency/region.h"

namespace epkit::ep {

namespace {

Error no_low_latency(const char* op) {
  return make_error(
      ErrorCode::unavailable,
      fmt::format("{}: this Buffer has no low-latency mode (see docs/ep-engine.md)", op));
}

}  // namespace

Result<LowLatencyDispatchResult> Buffer::low_latency_dispatch(const LowLatencyDispatchArgs&) {
  return no_low_latency("low_latency_dispatch");
}

Result<LowLatencyCombineResult> Buffer::low_latency_combine(const LowLatencyCombineArgs&) {
  return no_low_latency("low_latency_combine");
}

Result<TensorView> Buffer::get_next_low_latency_combine_buffer(const LowLatencyHandle&) {
  return no_low_latency("get_next_low_latency_combine_buffer");
}

Result<void> Buffer::clean_low_latency_buffer(int, int, int) {
  return no_low_latency("clean_low_latency_buffer");
}

std::size_t Buffer::low_latency_size_hint(int num_max_dispatch_tokens_per_rank, int hidden,
                                          int num_ranks, int num_experts) {
  auto region =
      low_latency::region_for(num_max_dispatch_tokens_per_rank, hidden, num_ranks, num_experts);
  return region ? static_cast<std::size_t>(region->total) : 0;
}

Result<void> LowLatencyHook::operator()() {
  if (!m_receive)
    return make_error(ErrorCode::invalid,
                      "low-latency hook: empty, or already called (a hook runs once)");
  auto receive = std::move(m_receive);
  m_receive = nullptr;
  return receive();
}

Result<k::LowLatencyRegion> BufferImpl::low_latency_region(const char* op, int max_tokens,
                                                           int hidden, int experts) const {
  return check_low_latency_region(op, m_opts, low_latency_ranks(), max_tokens, hidden, experts);
}

k::LowLatencyCommon BufferImpl::low_latency_common(const k::LowLatencyRegion& region, int buffer,
                                                   int phases) const {
  k::LowLatencyCommon c;
  c.phases = phases;
  c.rank = m_rank;
  c.num_ranks = m_ranks;
  c.buffer = buffer;
  c.region = region;
  for (int r = 0; r < m_ranks; ++r) c.base[r] = m_peers[r] + m_heap.low_latency;
  c.timeout_ns = static_cast<std::uint64_t>(m_opts.timeout_s * 1e9);
  c.mailbox = m_mailbox_dev;
  if (m_low_latency_world) m_low_latency_world(c);
  return c;
}

Result<Event> BufferImpl::low_latency_launch(const StreamOrder& order, const char* what,
                                             const std::function<cudaError_t()>& launch) {
  EPKIT_TRY(enter(order));
  if (cudaError_t rc = launch(); rc != cudaSuccess) return failure(rc, what);
  return leave(order);
}

LowLatencyHook BufferImpl::low_latency_hook(const StreamOrder& order, const char* what,
                                            std::function<cudaError_t()> launch) {
  // The receive half follows whatever the caller queued after the send (the
  // work the hook lets overlap), on the same stream; a `previous` event of
  // the send is not reused.
  StreamOrder after;
  after.stream = order.stream;
  after.want_event = false;
  // This rank's own lateness is found here, before any kernel: the
  // operation two calls later reused this one's buffer. A peer's is found by
  // the receive kernel (a slice's count word of a later epoch).
  const std::uint64_t issued = m_low_latency_issued;
  return LowLatencyHook([this, after, what, issued, launch = std::move(launch)]() -> Result<void> {
    if (m_low_latency_issued >= issued + 2)
      return make_error(
          ErrorCode::invalid,
          fmt::format("{}: called after this rank issued the low-latency operation two calls "
                      "later, which reused this operation's buffer: a hook was called more than "
                      "one operation late (at most two operations may be in flight, as in DeepEP)",
                      what));
    auto event = low_latency_launch(after, what, launch);
    if (!event) return event.error();
    return {};
  });
}

Result<TensorView> BufferImpl::get_next_low_latency_combine_buffer(const LowLatencyHandle& h) {
  auto region = low_latency_region("get_next_low_latency_combine_buffer",
                                   h.num_max_dispatch_tokens_per_rank, h.hidden, h.num_experts);
  if (!region) return region.error();
  const auto& g = *region;
  return TensorView::tensor3(
      m_peers[m_rank] + m_heap.low_latency + g.buffer[m_low_latency_next].combine_in, DType::bf16,
      g.local_experts, g.rows_per_expert, g.hidden);
}

Result<void> BufferImpl::clean_low_latency_buffer(int max_tokens, int hidden, int experts) {
  auto region = low_latency_region("clean_low_latency_buffer", max_tokens, hidden, experts);
  if (!region) return region.error();
  if (m_broken)
    return make_error(ErrorCode::unavailable, "the Buffer failed before and cannot be used");
  k::LowLatencyCleanParams p;
  p.sync = sync();
  std::uint8_t* own = m_peers[m_rank] + m_heap.low_latency;
  p.header = reinterpret_cast<k::LowLatencyHeader*>(own);
  for (int b = 0; b < 2; ++b) {
    p.slice_meta[b] = reinterpret_cast<std::uint64_t*>(own + region->buffer[b].slice_meta);
    p.combine_count[b] = reinterpret_cast<std::uint64_t*>(own + region->buffer[b].combine_count);
  }
  p.slice_meta_words = region->num_ranks * region->meta_pitch / 8;
  p.combine_count_words = 2 * region->num_ranks;
  if (cudaError_t rc = k::launch_low_latency_clean(p, m_stream); rc != cudaSuccess)
    return failure(rc, "clean_low_latency_buffer");
  m_low_latency_next = 0;
  return synchronize();
}

}  // namespace epkit::ep
