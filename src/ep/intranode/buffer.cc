// ep::Buffer: the host side of the engine. It owns one heap per rank (mapped
// by every other rank through CUDA IPC), the communication stream, a
// host-mapped mailbox for the counts, and the device epoch counter that names
// each barrier. This file: creation, stream ordering, barriers, failures.
// Buffer::create (src/ep/buffer.cc) picks this Buffer for a job on one node;
// its launchers sit beside their kernels in this folder (dispatch, combine) and
// in src/ep/low_latency/ (the low-latency mode, members of this class).
#include "ep/intranode/buffer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "ep/core/hex.h"
#include "ep/intranode/checks.h"

namespace epkit::ep {

namespace {

constexpr std::size_t k_align = 256;

std::size_t align_up(std::size_t v) {
  return (v + k_align - 1) / k_align * k_align;
}

}  // namespace

HeapLayout heap_layout(const BufferOptions& o, int ranks) {
  HeapLayout h;
  h.rows = static_cast<std::size_t>(ranks) * static_cast<std::size_t>(std::max(o.max_tokens, 0));
  h.row_bytes = static_cast<std::size_t>(std::max(o.max_hidden, 0)) * 2;
  h.num_scales = static_cast<std::size_t>(std::max(o.max_hidden, 0)) / k::k_scale_block;
  std::size_t topk = static_cast<std::size_t>(std::max(o.max_topk, 0));
  std::size_t at = align_up(sizeof(k::Meta));
  auto take = [&](std::size_t bytes) {
    std::size_t here = at;
    at = align_up(at + bytes);
    return here;
  };
  h.recv_x = take(h.rows * h.row_bytes);
  h.recv_scales = take(h.rows * h.num_scales * sizeof(float));
  h.recv_topk = take(h.rows * topk * sizeof(std::int64_t));
  h.recv_weights = take(h.rows * topk * sizeof(float));
  h.recv_src = take(h.rows * sizeof(std::int32_t));
  h.stage_x = take(h.rows * h.row_bytes);
  h.stage_w = take(h.rows * topk * sizeof(float));
  h.low_latency = take(o.low_latency_bytes);
  h.core = at;
  if (o.output_arena_bytes != 0) {
    // Last, on a 2 MiB boundary of the heap: a caching allocator put over
    // it asks for segments in 2 MiB units.
    constexpr std::size_t k_granule = std::size_t{2} << 20;
    at = (at + k_granule - 1) & ~(k_granule - 1);
    h.arena = take(o.output_arena_bytes);
    h.arena_bytes = o.output_arena_bytes;
  }
  h.total = at;
  return h;
}

Result<void> BufferImpl::init(Bootstrap& bootstrap, const BufferOptions& o, int rank_base) {
  m_opts = o;
  m_rank_base = rank_base;
  m_rank = bootstrap.rank();
  m_ranks = bootstrap.world_size();
  auto layout = check_buffer_options(o, m_ranks);
  if (!layout) return layout.error();
  m_heap = *layout;

  cudaError_t rc = cudaGetDevice(&m_device);
  if (rc != cudaSuccess) return cuda_error(rc, "cudaGetDevice");
  void* heap = nullptr;
  rc = cudaMalloc(&heap, m_heap.total);
  if (rc != cudaSuccess)
    return cuda_error(rc, fmt::format("cudaMalloc of the {}-byte heap", m_heap.total));
  m_peers[m_rank] = static_cast<std::uint8_t*>(heap);
  if ((rc = cudaMemset(heap, 0, sizeof(k::Meta))) != cudaSuccess)
    return cuda_error(rc, "cudaMemset");
  // The low-latency flags and epochs start at 0 on every rank.
  if (o.low_latency_bytes != 0 && (rc = cudaMemset(m_peers[m_rank] + m_heap.low_latency, 0,
                                                   sizeof(k::LowLatencyHeader))) != cudaSuccess)
    return cuda_error(rc, "cudaMemset");

  // Local memory: counters, layout outputs, per-expert counts, combine outputs.
  std::size_t tokens = static_cast<std::size_t>(o.max_tokens);
  std::size_t off_counter = 0;
  std::size_t off_scratch = 64;
  std::size_t off_rank = align_up(off_scratch + sizeof(int) * k::k_offsets_ints);
  std::size_t off_expert = align_up(off_rank + sizeof(int) * k::k_max_ranks);
  std::size_t off_in_rank = align_up(off_expert + sizeof(int) * k::k_max_experts);
  std::size_t off_recv_expert = align_up(off_in_rank + tokens * k::k_max_ranks);
  std::size_t off_cx = align_up(off_recv_expert + sizeof(int) * k::k_max_experts);
  std::size_t off_cw = align_up(off_cx + tokens * m_heap.row_bytes);
  std::size_t local_total = align_up(off_cw + tokens * static_cast<std::size_t>(o.max_topk) * 4);
  auto local = DeviceMemory::allocate(local_total);
  if (!local) return local.error();
  m_local = std::move(*local);
  auto* base = static_cast<std::uint8_t*>(m_local.get());
  if ((rc = cudaMemset(base, 0, off_rank)) != cudaSuccess) return cuda_error(rc, "cudaMemset");
  m_grid_counter = reinterpret_cast<std::int32_t*>(base + off_counter);
  m_epoch = reinterpret_cast<std::uint64_t*>(base + off_counter + 8);
  m_offsets_scratch = reinterpret_cast<std::int32_t*>(base + off_scratch);
  m_tokens_per_rank = reinterpret_cast<std::int32_t*>(base + off_rank);
  m_tokens_per_expert = reinterpret_cast<std::int32_t*>(base + off_expert);
  m_token_in_rank = reinterpret_cast<bool*>(base + off_in_rank);
  m_recv_per_expert = reinterpret_cast<std::int32_t*>(base + off_recv_expert);
  m_combined_x = reinterpret_cast<std::uint16_t*>(base + off_cx);
  m_combined_w = reinterpret_cast<float*>(base + off_cw);

  void* mailbox = nullptr;
  if ((rc = cudaHostAlloc(&mailbox, sizeof(k::Mailbox), cudaHostAllocMapped)) != cudaSuccess)
    return cuda_error(rc, "cudaHostAlloc of the mailbox");
  std::memset(mailbox, 0, sizeof(k::Mailbox));
  m_mailbox = static_cast<k::Mailbox*>(mailbox);
  void* mailbox_dev = nullptr;
  if ((rc = cudaHostGetDevicePointer(&mailbox_dev, mailbox, 0)) != cudaSuccess)
    return cuda_error(rc, "cudaHostGetDevicePointer");
  m_mailbox_dev = static_cast<k::Mailbox*>(mailbox_dev);
  if ((rc = cudaStreamCreateWithFlags(&m_stream_owner->stream, cudaStreamNonBlocking)) !=
      cudaSuccess)
    return cuda_error(rc, "cudaStreamCreate");
  m_stream = m_stream_owner->stream;
  if ((rc = cudaEventCreateWithFlags(&m_entry_event, cudaEventDisableTiming)) != cudaSuccess ||
      (rc = cudaEventCreateWithFlags(&m_exit_event, cudaEventDisableTiming)) != cudaSuccess)
    return cuda_error(rc, "cudaEventCreate");
  if ((rc = cudaDeviceSynchronize()) != cudaSuccess) return cuda_error(rc, "cudaDeviceSynchronize");

  // Trade IPC handles. The host name makes a Buffer over two nodes an error
  // here rather than a failed mapping.
  cudaIpcMemHandle_t handle;
  if ((rc = cudaIpcGetMemHandle(&handle, heap)) != cudaSuccess)
    return cuda_error(rc, "cudaIpcGetMemHandle");
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string mine =
      fmt::format("{} {} {} {}", to_hex(&handle, sizeof(handle)), m_heap.total, m_device, host);
  auto all = bootstrap.all_gather(mine);
  if (!all) return all.error();
  for (int r = 0; r < m_ranks; ++r) {
    char hex[2 * sizeof(cudaIpcMemHandle_t) + 1] = {};
    unsigned long long bytes = 0;
    int device = 0;
    char peer_host[256] = {};
    const std::string& s = (*all)[static_cast<std::size_t>(r)];
    if (std::sscanf(s.c_str(), "%128s %llu %d %255s", hex, &bytes, &device, peer_host) != 4)
      return invalid(fmt::format("rank {} sent a malformed Buffer handshake", r));
    if (std::string(peer_host) != host)
      return invalid(fmt::format("rank {} runs on {} and rank {} on {}: a Buffer spans one node", r,
                                 peer_host, m_rank, host));
    if (bytes != m_heap.total)
      return invalid(
          fmt::format("rank {} made a {}-byte heap, rank {} a {}-byte one: every rank must "
                      "pass the same BufferOptions",
                      r, bytes, m_rank, m_heap.total));
    if (r == m_rank) continue;
    cudaIpcMemHandle_t peer;
    if (!from_hex(hex, &peer, sizeof(peer)))
      return invalid(fmt::format("rank {} sent a malformed IPC handle", r));
    void* mapped = nullptr;
    rc = cudaIpcOpenMemHandle(&mapped, peer, cudaIpcMemLazyEnablePeerAccess);
    if (rc != cudaSuccess)
      return cuda_error(rc, fmt::format("mapping rank {}'s heap (GPU {} of {}) through CUDA IPC", r,
                                        device, peer_host));
    m_peers[r] = static_cast<std::uint8_t*>(mapped);
  }
  // Nobody may signal a peer before that peer mapped everything.
  auto ready = bootstrap.all_gather("mapped");
  if (!ready) return ready.error();
  return {};
}

BufferImpl::~BufferImpl() {
  // Peers may still read this heap: meet them first (bounded by the kernel
  // timeout), unless a failure already broke the context.
  if (!m_broken && m_stream != nullptr && m_peers[m_rank] != nullptr) {
    if (k::launch_notify_peers({sync()}, m_stream) == cudaSuccess) cudaStreamSynchronize(m_stream);
  }
  for (int r = 0; r < m_ranks; ++r)
    if (r != m_rank && m_peers[r] != nullptr) cudaIpcCloseMemHandle(m_peers[r]);
  if (m_peers[m_rank] != nullptr) cudaFree(m_peers[m_rank]);
  if (m_mailbox != nullptr) cudaFreeHost(m_mailbox);
  if (m_entry_event != nullptr) cudaEventDestroy(m_entry_event);
  if (m_exit_event != nullptr) cudaEventDestroy(m_exit_event);
}

k::SyncParams BufferImpl::sync() const {
  k::SyncParams s;
  s.rank = m_rank;
  s.num_ranks = m_ranks;
  for (int r = 0; r < m_ranks; ++r) s.signal[r] = meta(r)->signal;
  s.timeout_ns = static_cast<std::uint64_t>(m_opts.timeout_s * 1e9);
  s.mailbox = m_mailbox_dev;
  s.grid_counter = reinterpret_cast<unsigned int*>(m_grid_counter);
  s.epoch = m_epoch;
  s.blame = &meta(m_rank)->blame;
  return s;
}

Error BufferImpl::failure(cudaError_t rc, const std::string& what) {
  int kind = m_mailbox != nullptr ? m_mailbox->error : 0;
  if (kind == k::k_timeout_barrier) {
    m_broken = true;
    return make_error(
        ErrorCode::timeout,
        fmt::format("{}: rank {} did not reach the engine's barrier within {} s (it died, "
                    "hung, or called a different operation)",
                    what, m_rank_base + m_mailbox->error_rank, m_opts.timeout_s));
  }
  if (kind == k::k_peer_blamed) {
    m_broken = true;
    return make_error(ErrorCode::timeout,
                      fmt::format("{}: rank {} of this node stopped because rank {} (on another "
                                  "node) never answered on the network; rank {} died or hung",
                                  what, m_rank_base + static_cast<int>(m_mailbox->error_value),
                                  m_mailbox->error_rank, m_mailbox->error_rank));
  }
  if (kind == k::k_timeout_low_latency) {
    m_broken = true;
    const long long wait = m_mailbox->error_value;
    // Across nodes the kernels number ranks globally already.
    const int who = (m_low_latency_ranks > 0 ? 0 : m_rank_base) + m_mailbox->error_rank;
    if (wait == k::k_low_latency_put)
      return make_error(
          ErrorCode::timeout,
          fmt::format("{}: the network leg did not carry a low-latency put to rank {} "
                      "within {} s (its NIC stalled or the rank's memory is gone){}",
                      what, who, m_opts.timeout_s,
                      m_network_note ? "; " + m_network_note() : std::string()));
    if (wait == k::k_low_latency_overwritten)
      return make_error(
          ErrorCode::invalid,
          fmt::format("{}: rank {} sent its next low-latency dispatch into this buffer before this "
                      "rank's receive hook read the one before: a hook was called more than one "
                      "operation late, or rank {} ran two operations ahead of this rank's hook (at "
                      "most two operations may be in flight, as in DeepEP)",
                      what, who, who));
    if (wait == k::k_low_latency_bad_count)
      return make_error(ErrorCode::internal,
                        fmt::format("{}: rank {} sent low-latency counts or token entries out of "
                                    "range (more rows for one expert than "
                                    "num_max_dispatch_tokens_per_rank, a token outside its "
                                    "tokens) or of another operation",
                                    what, who));
    const char* missing = wait == k::k_low_latency_wait_counts ? "its low-latency dispatch counts"
                          : wait == k::k_low_latency_wait_dispatch ? "its low-latency dispatch rows"
                                                                   : "its low-latency combine rows";
    if (m_exited_peer)
      if (auto gone = m_exited_peer(); gone && *gone == who)
        return make_error(
            ErrorCode::unavailable,
            fmt::format("{}: rank {}'s process exited before it sent {}", what, who, missing));
    return make_error(ErrorCode::timeout,
                      fmt::format("{}: rank {} did not send {} within {} s (it died, hung, or "
                                  "called a different operation)",
                                  what, who, missing, m_opts.timeout_s));
  }
  if (kind == k::k_timeout_network) {
    m_broken = true;
    const auto value = static_cast<std::uint64_t>(m_mailbox->error_value);
    const auto wait = value & 0xff & ~static_cast<std::uint64_t>(k::k_leg_wait_exited);
    const bool exited = (value & k::k_leg_wait_exited) != 0;
    // 0..2: the leg exchange's waits; 3 and up: ring mode's (RingWait).
    const char* missing = wait == 0   ? "said it was ready for the exchange"
                          : wait == 1 ? "delivered its part of the exchange"
                          : wait == 2 ? "let this rank's puts leave (its flush)"
                          : wait == 3 ? "sent its count message"
                          : wait == 4 ? "delivered a chunk of rows on its ring"
                          : wait == 5 ? "freed room in its ring (its credits)"
                          : wait == 6 ? "forwarded rows over NVLink"
                          : wait == 7 ? "freed room in an NVLink ring"
                                      : "let the leg take this rank's put";
    if (exited) {
      // The wait may have been on another rank, alive and stuck behind
      // this one: the dead rank is the one to name.
      return make_error(
          ErrorCode::unavailable,
          fmt::format("{}: rank {} died: its process exited while this rank waited on the "
                      "network leg{}",
                      what, m_mailbox->error_rank,
                      m_network_note ? "; " + m_network_note() : std::string()));
    }
    std::string seen;
    if (wait < 2 || (wait >= 3 && wait <= 7))
      seen = fmt::format("; its signal reached {} of {}", (value >> 8) & 0xfffffff,
                         (value >> 36) & 0xfffffff);
    return make_error(
        ErrorCode::timeout,
        fmt::format("{}: rank {} never {} on the network leg within the timeout (it died, hung, "
                    "or called a different operation){}{}",
                    what, m_mailbox->error_rank, missing, seen,
                    m_network_note ? "; " + m_network_note() : std::string()));
  }
  if (kind == k::k_bad_leg_message) {
    m_broken = true;
    const long long sender = m_mailbox->error_rank;
    const long long value = m_mailbox->error_value;
    return invalid(fmt::format(
        "{}: {}", what,
        m_leg_message_text
            ? m_leg_message_text(sender, value)
            : fmt::format("rank {} sent a count message that failed its check", sender)));
  }
  if (kind == k::k_worst_too_small) {
    m_broken = true;
    return invalid(fmt::format("{}: rank {} received {} rows, more than num_worst_tokens", what,
                               m_rank_base + m_mailbox->error_rank,
                               static_cast<long long>(m_mailbox->error_value)));
  }
  if (kind == k::k_bad_expert) {
    long long token = m_mailbox->error_rank;
    long long value = m_mailbox->error_value;
    m_mailbox->error = 0;
    if (rc == cudaSuccess)
      return invalid(fmt::format(
          "{}: topk_idx of token {} names expert {}, outside -1..experts-1 (the slot was "
          "ignored)",
          what, token, value));
  }
  if (kind == k::k_timeout_local) {
    m_broken = true;
    return make_error(
        ErrorCode::timeout,
        fmt::format("{}: a block of the count exchange waited past the timeout", what));
  }
  if (rc != cudaSuccess) m_broken = true;
  if (rc != cudaSuccess && kind == 0 && m_exited_peer) {
    // None of this rank's kernels gave up, yet they failed: a peer whose
    // process exited while they ran is the cause to name (the memory they
    // write went with it; under MPS a fault of any client ends every
    // client's kernels). Looked for a moment: the error can reach this rank
    // while the dying process is still being torn down.
    for (int look = 0; look < 20; ++look) {
      if (const auto gone = m_exited_peer()) {
        return make_error(ErrorCode::unavailable,
                          fmt::format("{}: rank {} died: its process exited while this rank's "
                                      "kernels ran ({}: {})",
                                      what, *gone, cudaGetErrorName(rc), cudaGetErrorString(rc)));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (rc == cudaErrorLaunchFailure && kind == 0) {
    // Every kernel of this rank that gives up writes the mailbox before it
    // traps, so a launch failure with an empty mailbox came from elsewhere:
    // under MPS a fault in one client's kernel ends every client's kernels on
    // that GPU, as when ranks share it and another rank timed out on a peer.
    return cuda_error(rc, fmt::format("{} (none of this rank's kernels gave up; where ranks share "
                                      "a GPU under MPS, another rank's failure, such as its "
                                      "timeout naming a dead peer, ends every rank's kernels)",
                                      what));
  }
  return cuda_error(rc, what);
}

void BufferImpl::blame_peers(int global_rank) {
  const std::int32_t value = global_rank + 1;
  // Best effort: this rank is failing anyway; a peer that cannot be told
  // still times out on its own.
  for (int r = 0; r < m_ranks; ++r)
    if (r != m_rank && m_peers[r] != nullptr)
      (void)cudaMemcpy(&meta(r)->blame, &value, sizeof(value), cudaMemcpyHostToDevice);
}

Result<void> BufferImpl::enter(const StreamOrder& order) {
  if (m_broken)
    return make_error(ErrorCode::unavailable, "the Buffer failed before and cannot be used");
  // Before the stream joins the caller's (possibly captured) one.
  m_stream_owner->drain();
  cudaError_t rc;
  if (order.previous != nullptr) {
    rc = cudaStreamWaitEvent(m_stream, order.previous, 0);
  } else {
    rc = cudaEventRecord(m_entry_event, order.stream);
    if (rc == cudaSuccess) rc = cudaStreamWaitEvent(m_stream, m_entry_event, 0);
  }
  if (rc != cudaSuccess) return failure(rc, "ordering the communication stream");
  return {};
}

Result<Event> BufferImpl::leave(const StreamOrder& order) {
  cudaError_t rc;
  if (!order.want_event) {
    // Nobody keeps the event: the Buffer's own one serves (an event creation
    // is a few microseconds of a small call's host time).
    if (order.async) return Event{};
    if ((rc = cudaEventRecord(m_exit_event, m_stream)) != cudaSuccess)
      return failure(rc, "cudaEventRecord");
    if ((rc = cudaStreamWaitEvent(order.stream, m_exit_event, 0)) != cudaSuccess)
      return failure(rc, "cudaStreamWaitEvent");
    return Event{};
  }
  cudaEvent_t ev = nullptr;
  rc = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (rc != cudaSuccess) return failure(rc, "cudaEventCreate");
  Event event(ev);
  if ((rc = cudaEventRecord(ev, m_stream)) != cudaSuccess) return failure(rc, "cudaEventRecord");
  if (!order.async && (rc = cudaStreamWaitEvent(order.stream, ev, 0)) != cudaSuccess)
    return failure(rc, "cudaStreamWaitEvent");
  return event;
}

Result<void> BufferImpl::wait_counts(std::uint64_t seq) {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<long long>(m_opts.timeout_s * 1000) + 5000);
  for (std::uint64_t spins = 0;; ++spins) {
    if (m_mailbox->counts_epoch == seq) break;
    if (m_mailbox->error != 0) return failure(cudaSuccess, "dispatch (count exchange)");
    if ((spins & 1023) == 1023) {
      cudaError_t rc = cudaStreamQuery(m_stream);
      if (rc != cudaSuccess && rc != cudaErrorNotReady)
        return failure(rc, "dispatch (count exchange)");
      if (std::chrono::steady_clock::now() > deadline) {
        m_broken = true;
        return make_error(ErrorCode::timeout,
                          fmt::format("dispatch: the receive counts did not arrive within {} s",
                                      m_opts.timeout_s + 5));
      }
      std::this_thread::yield();
    }
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  return {};
}

Buffer::Region BufferImpl::output_arena() const {
  if (m_heap.arena_bytes == 0) return {};
  return {m_peers[m_rank] + m_heap.arena, m_heap.arena_bytes};
}

Result<TensorView> BufferImpl::combine_input(std::int64_t rows, std::int64_t hidden) {
  if (rows < 0 || rows > static_cast<std::int64_t>(m_heap.rows) || hidden <= 0 ||
      hidden > m_opts.max_hidden || hidden % 8 != 0)
    return invalid(
        fmt::format("combine_input: [{}, {}] must fit [{}, {}] with hidden a multiple of 8", rows,
                    hidden, m_heap.rows, m_opts.max_hidden));
  return TensorView::matrix(m_peers[m_rank] + m_heap.stage_x, DType::bf16, rows, hidden);
}

Result<TensorView> BufferImpl::combine_weights_input(std::int64_t rows, std::int64_t topk) {
  if (rows < 0 || rows > static_cast<std::int64_t>(m_heap.rows) || topk < 1 ||
      topk > m_opts.max_topk)
    return invalid(fmt::format("combine_weights_input: [{}, {}] must fit [{}, {}]", rows, topk,
                               m_heap.rows, m_opts.max_topk));
  return TensorView::matrix(m_peers[m_rank] + m_heap.stage_w, DType::fp32, rows, topk);
}

Result<void> BufferImpl::barrier() {
  if (m_broken)
    return make_error(ErrorCode::unavailable, "the Buffer failed before and cannot be used");
  if (cudaError_t rc = k::launch_notify_peers({sync()}, m_stream); rc != cudaSuccess)
    return failure(rc, "barrier");
  if (cudaError_t rc = cudaStreamSynchronize(m_stream); rc != cudaSuccess)
    return failure(rc, "barrier");
  return {};
}

Result<void> BufferImpl::synchronize() {
  cudaError_t rc = cudaStreamSynchronize(m_stream);
  if (rc != cudaSuccess || m_mailbox->error != 0) return failure(rc, "the communication stream");
  return {};
}

}  // namespace epkit::ep
