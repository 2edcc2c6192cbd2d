// ep::Buffer: the host side of the engine. It owns one heap per rank (mapped
// by every other rank through CUDA IPC), the communication stream, a
// host-mapped mailbox for the counts, and the epoch counter that names each
// barrier. Kernels and their launchers live in src/ep/kernels/.
#include <epkit/ep.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "ep/device_memory.h"
#include "ep/kernels/engine_kernels.h"

namespace epkit::ep {
namespace k = kernels;

namespace {

constexpr std::size_t k_align = 256;

std::size_t align_up(std::size_t v) {
  return (v + k_align - 1) / k_align * k_align;
}

/// Where each region sits in a rank's heap; the same on every rank.
struct HeapLayout {
  std::size_t rows = 0;  // receive rows: ranks * max_tokens
  std::size_t row_bytes = 0;
  std::size_t num_scales = 0;
  std::size_t recv_x = 0, recv_scales = 0, recv_topk = 0, recv_weights = 0, recv_src = 0;
  std::size_t stage_x = 0, stage_w = 0, total = 0;
};

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
  h.total = at;
  return h;
}

Error invalid(std::string message) {
  return make_error(ErrorCode::invalid, std::move(message));
}

std::string to_hex(const void* data, std::size_t n) {
  std::string s;
  const auto* b = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) s += fmt::format("{:02x}", b[i]);
  return s;
}

bool from_hex(const std::string& s, void* out, std::size_t n) {
  if (s.size() != 2 * n) return false;
  auto* b = static_cast<unsigned char*>(out);
  for (std::size_t i = 0; i < n; ++i) {
    unsigned int v = 0;
    if (std::sscanf(s.c_str() + 2 * i, "%2x", &v) != 1) return false;
    b[i] = static_cast<unsigned char>(v);
  }
  return true;
}

bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

/// Given: it has memory, or it is an empty matrix with a shape (a rank
/// with no tokens still says how many columns its top-k has).
bool given(const TensorView& v) {
  return v.data != nullptr || (v.ndim == 2 && v.shape[1] > 0);
}

/// A row-major matrix of `dtype` whose rows are 16-byte aligned.
Result<void> check_rows(const TensorView& v, const char* name, DType dtype) {
  if (!given(v)) return invalid(fmt::format("{} is missing", name));
  if (v.data == nullptr && v.rows() != 0)
    return invalid(fmt::format("{} has rows but no memory", name));
  if (v.dtype != dtype)
    return invalid(fmt::format("{} is {}, expected {}", name, v.describe(), to_string(dtype)));
  if (v.ndim != 2 || v.strides[1] != 1 || v.strides[0] < v.shape[1])
    return invalid(fmt::format("{} ({}) must be a row-major matrix (strides {}, {})", name,
                               v.describe(), v.strides[0], v.strides[1]));
  if (v.rows() == 0) return {};
  if (!aligned16(v.data) || (v.strides[0] * static_cast<std::int64_t>(dtype_size(dtype))) % 16 != 0)
    return invalid(fmt::format("{} rows must start on 16-byte boundaries", name));
  return {};
}

/// The communication stream, shared by the Buffer and its handles: a handle
/// frees its arrays on it, so it must live as long as the last of them.
struct Stream {
  cudaStream_t stream = nullptr;
  Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

class Handle final : public DispatchHandle {
 public:
  Handle(void* memory, std::shared_ptr<Stream> stream)
      : m_memory(memory), m_stream(std::move(stream)) {}
  ~Handle() override {
    if (m_memory != nullptr) cudaFreeAsync(m_memory, m_stream->stream);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

 private:
  void* m_memory;
  std::shared_ptr<Stream> m_stream;
};

class BufferImpl final : public Buffer {
 public:
  ~BufferImpl() override;

  int rank() const override { return m_rank; }
  int num_ranks() const override { return m_ranks; }
  cudaStream_t comm_stream() const override { return m_stream; }
  Result<Layout> layout(const TensorView& topk_idx, int num_experts,
                        const StreamOrder& order) override;
  Result<DispatchResult> dispatch(const DispatchArgs& args) override;
  Result<CombineResult> combine(const CombineArgs& args) override;
  Result<TensorView> combine_input(std::int64_t rows, std::int64_t hidden) override;
  Result<TensorView> combine_weights_input(std::int64_t rows, std::int64_t topk) override;
  Result<void> barrier() override;
  Result<void> synchronize() override;

  Result<void> init(Bootstrap& bootstrap, const BufferOptions& options);

 private:
  k::SyncParams sync() const;
  k::Meta* meta(int r) const { return reinterpret_cast<k::Meta*>(m_peers[r]); }
  Result<void> enter(const StreamOrder& order);
  Result<Event> leave(const StreamOrder& order);
  Error failure(cudaError_t rc, const std::string& what);
  Result<void> wait_counts(std::uint64_t seq);
  Result<DispatchResult> dispatch_cached(const DispatchArgs& args);

  BufferOptions m_opts;
  HeapLayout m_heap;
  int m_rank = 0;
  int m_ranks = 1;
  int m_device = 0;
  std::uint8_t* m_peers[k::k_max_ranks] = {};  // m_peers[m_rank] is our own heap
  std::shared_ptr<Stream> m_stream_owner = std::make_shared<Stream>();
  cudaStream_t m_stream = nullptr;
  cudaEvent_t m_entry_event = nullptr;
  k::Mailbox* m_mailbox = nullptr;  // host pointer
  k::Mailbox* m_mailbox_dev = nullptr;
  DeviceMemory m_local;  // counters and layout/combine outputs
  std::int32_t* m_grid_counter = nullptr;
  std::int32_t* m_offsets_scratch = nullptr;
  std::int32_t* m_tokens_per_rank = nullptr;
  std::int32_t* m_tokens_per_expert = nullptr;
  bool* m_token_in_rank = nullptr;
  std::int32_t* m_recv_per_expert = nullptr;
  std::uint16_t* m_combined_x = nullptr;
  float* m_combined_w = nullptr;
  std::uint64_t m_count_seq = 0;     // numbers the counts the mailbox carries
  std::uint64_t* m_epoch = nullptr;  // device (see SyncParams::epoch)
  bool m_broken = false;
};

Result<void> BufferImpl::init(Bootstrap& bootstrap, const BufferOptions& o) {
  m_opts = o;
  m_rank = bootstrap.rank();
  m_ranks = bootstrap.world_size();
  if (m_ranks < 1 || m_ranks > k::k_max_ranks)
    return invalid(
        fmt::format("a Buffer spans 1 to {} ranks of one node, not {}", k::k_max_ranks, m_ranks));
  if (o.max_tokens < 0 || o.max_hidden <= 0 || o.max_hidden % k::k_scale_block != 0)
    return invalid(
        fmt::format("BufferOptions: max_tokens {} must be >= 0 and max_hidden {} a positive "
                    "multiple of {}",
                    o.max_tokens, o.max_hidden, k::k_scale_block));
  if (o.max_topk < 1 || o.max_topk > 32)
    return invalid(fmt::format("BufferOptions.max_topk = {}: must be 1..32", o.max_topk));
  if (!(o.timeout_s > 0)) return invalid("BufferOptions.timeout_s must be positive");
  m_heap = heap_layout(o, m_ranks);
  if (o.num_bytes != 0 && o.num_bytes < m_heap.total)
    return invalid(fmt::format(
        "the Buffer needs {} bytes per GPU for {} ranks x {} tokens x hidden {} (top-{}), but "
        "num_bytes allows {}",
        m_heap.total, m_ranks, o.max_tokens, o.max_hidden, o.max_topk, o.num_bytes));

  cudaError_t rc = cudaGetDevice(&m_device);
  if (rc != cudaSuccess) return cuda_error(rc, "cudaGetDevice");
  void* heap = nullptr;
  rc = cudaMalloc(&heap, m_heap.total);
  if (rc != cudaSuccess)
    return cuda_error(rc, fmt::format("cudaMalloc of the {}-byte heap", m_heap.total));
  m_peers[m_rank] = static_cast<std::uint8_t*>(heap);
  if ((rc = cudaMemset(heap, 0, sizeof(k::Meta))) != cudaSuccess)
    return cuda_error(rc, "cudaMemset");

  // Local memory: counters, layout outputs, per-expert counts, combine outputs.
  std::size_t tokens = static_cast<std::size_t>(o.max_tokens);
  std::size_t off_counter = 0;
  std::size_t off_scratch = 64;
  std::size_t off_rank = align_up(off_scratch + sizeof(int) * (k::k_max_ranks + 2));
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
  if ((rc = cudaEventCreateWithFlags(&m_entry_event, cudaEventDisableTiming)) != cudaSuccess)
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
    if (k::launch_barrier(sync(), m_stream) == cudaSuccess) cudaStreamSynchronize(m_stream);
  }
  for (int r = 0; r < m_ranks; ++r)
    if (r != m_rank && m_peers[r] != nullptr) cudaIpcCloseMemHandle(m_peers[r]);
  if (m_peers[m_rank] != nullptr) cudaFree(m_peers[m_rank]);
  if (m_mailbox != nullptr) cudaFreeHost(m_mailbox);
  if (m_entry_event != nullptr) cudaEventDestroy(m_entry_event);
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
                    what, m_mailbox->error_rank, m_opts.timeout_s));
  }
  if (kind == k::k_worst_too_small) {
    m_broken = true;
    return invalid(fmt::format("{}: rank {} received {} rows, more than num_worst_tokens", what,
                               m_mailbox->error_rank,
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
  return cuda_error(rc, what);
}

Result<void> BufferImpl::enter(const StreamOrder& order) {
  if (m_broken)
    return make_error(ErrorCode::unavailable, "the Buffer failed before and cannot be used");
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
  cudaEvent_t ev = nullptr;
  cudaError_t rc = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
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

Result<Layout> BufferImpl::layout(const TensorView& topk, int num_experts,
                                  const StreamOrder& order) {
  if (topk.data == nullptr && topk.numel() != 0) return invalid("layout: topk_idx is missing");
  if ((topk.dtype != DType::int64 && topk.dtype != DType::int32) || topk.ndim != 2 ||
      topk.strides[1] != 1)
    return invalid(fmt::format("layout: topk_idx ({}) must be a row-major int64 or int32 matrix",
                               topk.describe()));
  if (topk.rows() > m_opts.max_tokens)
    return invalid(fmt::format("layout: {} tokens, the Buffer was made for at most {}", topk.rows(),
                               m_opts.max_tokens));
  if (num_experts <= 0 || num_experts > k::k_max_experts || num_experts % m_ranks != 0)
    return invalid(fmt::format("layout: {} experts must be 1..{} and a multiple of the {} ranks",
                               num_experts, k::k_max_experts, m_ranks));
  EPKIT_TRY(enter(order));
  k::LayoutParams p;
  p.topk = topk.data;
  p.topk_int64 = topk.dtype == DType::int64;
  p.topk_stride = topk.strides[0];
  p.num_tokens = static_cast<int>(topk.rows());
  p.num_topk = static_cast<int>(topk.cols());
  p.num_experts = num_experts;
  p.num_ranks = m_ranks;
  p.num_tokens_per_rank = m_tokens_per_rank;
  p.num_tokens_per_expert = m_tokens_per_expert;
  p.is_token_in_rank = m_token_in_rank;
  p.mailbox = m_mailbox_dev;
  if (cudaError_t rc = k::launch_layout(p, m_stream); rc != cudaSuccess)
    return failure(rc, "layout");
  auto event = leave(order);
  if (!event) return event.error();
  Layout out;
  out.num_tokens_per_rank = TensorView::vector(m_tokens_per_rank, DType::int32, m_ranks);
  out.num_tokens_per_expert = TensorView::vector(m_tokens_per_expert, DType::int32, num_experts);
  out.is_token_in_rank = TensorView::matrix(m_token_in_rank, DType::boolean, topk.rows(), m_ranks);
  out.event = std::move(*event);
  return out;
}

Result<DispatchResult> BufferImpl::dispatch(const DispatchArgs& a) {
  EPKIT_TRY(a.config.validate());
  const TensorView& x = a.x;
  if (x.dtype != DType::bf16 && x.dtype != DType::fp8_e4m3)
    return invalid(fmt::format("dispatch: x is {}, expected bf16 or fp8_e4m3", x.describe()));
  EPKIT_TRY(check_rows(x, "dispatch: x", x.dtype));
  const bool fp8 = x.dtype == DType::fp8_e4m3;
  const int tokens = static_cast<int>(x.rows());
  const int hidden = static_cast<int>(x.cols());
  if (tokens > m_opts.max_tokens || hidden > m_opts.max_hidden)
    return invalid(
        fmt::format("dispatch: x is {}, the Buffer was made for at most {} tokens of hidden {}",
                    x.describe(), m_opts.max_tokens, m_opts.max_hidden));
  if ((hidden * static_cast<int>(dtype_size(x.dtype))) % 16 != 0)
    return invalid(
        fmt::format("dispatch: rows of {} are not a multiple of 16 bytes", x.describe()));
  if (fp8) {
    if (hidden % k::k_scale_block != 0)
      return invalid(fmt::format("dispatch: FP8 hidden {} must be a multiple of {}", hidden,
                                 k::k_scale_block));
    const TensorView& s = a.x_scales;
    if (!given(s) || s.dtype != DType::fp32 || s.ndim != 2 || s.rows() != tokens ||
        s.cols() != hidden / k::k_scale_block)
      return invalid(fmt::format("dispatch: FP8 x needs x_scales fp32[{}, {}], got {}", tokens,
                                 hidden / k::k_scale_block, !given(s) ? "none" : s.describe()));
  } else if (given(a.x_scales)) {
    return invalid("dispatch: x_scales given with a BF16 x (scales go with FP8 only)");
  }
  if (a.num_worst_tokens < 0 || a.num_worst_tokens > m_ranks * m_opts.max_tokens)
    return invalid(fmt::format("dispatch: num_worst_tokens {} must be 0..{}", a.num_worst_tokens,
                               m_ranks * m_opts.max_tokens));
  if (a.expert_alignment < 1) return invalid("dispatch: expert_alignment must be >= 1");
  if (a.handle) return dispatch_cached(a);

  const bool with_topk = given(a.topk_idx);
  int num_topk = 0;
  if (with_topk) {
    const TensorView& t = a.topk_idx;
    if ((t.dtype != DType::int64 && t.dtype != DType::int32) || t.ndim != 2 || t.strides[1] != 1 ||
        t.rows() != tokens || t.cols() < 1 || t.cols() > m_opts.max_topk)
      return invalid(
          fmt::format("dispatch: topk_idx ({}) must be a row-major int64/int32 [{}, 1..{}]",
                      t.describe(), tokens, m_opts.max_topk));
    num_topk = static_cast<int>(t.cols());
  }
  const bool with_weights = given(a.topk_weights);
  if (with_weights) {
    const TensorView& w = a.topk_weights;
    if (!with_topk) return invalid("dispatch: topk_weights given without topk_idx");
    if (w.dtype != DType::fp32 || w.ndim != 2 || w.strides[1] != 1 || w.rows() != tokens ||
        w.cols() != num_topk)
      return invalid(fmt::format("dispatch: topk_weights ({}) must be row-major fp32 [{}, {}]",
                                 w.describe(), tokens, num_topk));
  }
  const TensorView& ntpr = a.num_tokens_per_rank;
  const TensorView& itir = a.is_token_in_rank;
  const TensorView& ntpe = a.num_tokens_per_expert;
  if (ntpr.data == nullptr || ntpr.dtype != DType::int32 || ntpr.numel() != m_ranks)
    return invalid(
        fmt::format("dispatch: num_tokens_per_rank must be int32[{}] (from layout())", m_ranks));
  if (!given(itir) || itir.dtype != DType::boolean || itir.ndim != 2 || itir.rows() != tokens ||
      itir.cols() != m_ranks || itir.strides[1] != 1)
    return invalid(
        fmt::format("dispatch: is_token_in_rank must be a row-major bool[{}, {}] (from layout())",
                    tokens, m_ranks));
  const int num_experts = static_cast<int>(ntpe.numel());
  if (ntpe.data == nullptr || ntpe.dtype != DType::int32 || num_experts <= 0 ||
      num_experts > k::k_max_experts || num_experts % m_ranks != 0)
    return invalid(
        fmt::format("dispatch: num_tokens_per_expert must be int32[experts], experts a multiple of "
                    "{} up to {}",
                    m_ranks, k::k_max_experts));

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

  k::DispatchParams dp;
  dp.sync = np.sync;
  dp.entry_barrier = false;  // the count exchange was one
  dp.x = static_cast<const std::uint8_t*>(x.data);
  dp.x_stride = x.strides[0] * static_cast<std::int64_t>(dtype_size(x.dtype));
  dp.row_bytes = hidden * static_cast<int>(dtype_size(x.dtype));
  if (fp8) {
    dp.scales = static_cast<const float*>(a.x_scales.data);
    dp.scale_stride_token = a.x_scales.strides[0];
    dp.scale_stride_hidden = a.x_scales.strides[1];
    dp.num_scales = hidden / k::k_scale_block;
  }
  if (with_topk) {
    dp.topk = a.topk_idx.data;
    dp.topk_int64 = a.topk_idx.dtype == DType::int64;
    dp.topk_stride = a.topk_idx.strides[0];
    dp.num_topk = num_topk;
    dp.weights = static_cast<const float*>(a.topk_weights.data);
    dp.weights_stride = a.topk_weights.strides[0];
  }
  dp.send_row = send_row;
  dp.num_tokens = tokens;
  dp.experts_per_rank = num_experts / m_ranks;
  for (int r = 0; r < m_ranks; ++r) {
    dp.recv_x[r] = m_peers[r] + m_heap.recv_x;
    dp.recv_scales[r] = reinterpret_cast<float*>(m_peers[r] + m_heap.recv_scales);
    dp.recv_topk[r] = m_peers[r] + m_heap.recv_topk;
    dp.recv_weights[r] = reinterpret_cast<float*>(m_peers[r] + m_heap.recv_weights);
    dp.recv_src[r] = reinterpret_cast<std::int32_t*>(m_peers[r] + m_heap.recv_src);
  }
  dp.num_worst_tokens = a.num_worst_tokens;
  dp.rank_prefix_matrix = prefix;
  dp.num_warps = a.config.num_warps;
  dp.chunk = a.config.nvl_chunk;
  dp.num_blocks = a.config.num_sms;
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
  out.recv_x = TensorView::matrix(own + m_heap.recv_x, x.dtype, rows, hidden);
  if (fp8)
    out.recv_x_scales =
        TensorView::matrix(own + m_heap.recv_scales, DType::fp32, rows, hidden / k::k_scale_block);
  if (with_topk) {
    out.recv_topk_idx =
        TensorView::matrix(own + m_heap.recv_topk, a.topk_idx.dtype, rows, num_topk);
    if (with_weights)
      out.recv_topk_weights =
          TensorView::matrix(own + m_heap.recv_weights, DType::fp32, rows, num_topk);
  }
  out.recv_src_idx = TensorView::vector(own + m_heap.recv_src, DType::int32, rows);
  out.recv_tokens_per_expert =
      TensorView::vector(m_recv_per_expert, DType::int32, num_experts / m_ranks);
  out.handle = std::move(handle);
  out.event = std::move(*event);
  return out;
}

Result<DispatchResult> BufferImpl::dispatch_cached(const DispatchArgs& a) {
  const DispatchHandle& h = *a.handle;
  const int tokens = static_cast<int>(a.x.rows());
  const int hidden = static_cast<int>(a.x.cols());
  if (h.num_ranks != m_ranks || h.num_tokens != tokens)
    return invalid(fmt::format(
        "cached dispatch: the handle is for {} tokens over {} ranks, x has {} tokens over {}",
        h.num_tokens, h.num_ranks, tokens, m_ranks));
  if (given(a.topk_idx) || given(a.topk_weights))
    return invalid(
        "cached dispatch: pass x (and x_scales) only; top-k goes with the first dispatch");
  EPKIT_TRY(enter(a.order));
  k::DispatchParams dp;
  dp.sync = sync();
  dp.entry_barrier = true;
  dp.x = static_cast<const std::uint8_t*>(a.x.data);
  dp.x_stride = a.x.strides[0] * static_cast<std::int64_t>(dtype_size(a.x.dtype));
  dp.row_bytes = hidden * static_cast<int>(dtype_size(a.x.dtype));
  const bool fp8 = a.x.dtype == DType::fp8_e4m3;
  if (fp8) {
    dp.scales = static_cast<const float*>(a.x_scales.data);
    dp.scale_stride_token = a.x_scales.strides[0];
    dp.scale_stride_hidden = a.x_scales.strides[1];
    dp.num_scales = hidden / k::k_scale_block;
  }
  dp.send_row = static_cast<const std::int32_t*>(h.send_row.data);
  dp.num_tokens = tokens;
  dp.experts_per_rank = 1;
  for (int r = 0; r < m_ranks; ++r) {
    dp.recv_x[r] = m_peers[r] + m_heap.recv_x;
    dp.recv_scales[r] = reinterpret_cast<float*>(m_peers[r] + m_heap.recv_scales);
    dp.recv_topk[r] = m_peers[r] + m_heap.recv_topk;
    dp.recv_weights[r] = reinterpret_cast<float*>(m_peers[r] + m_heap.recv_weights);
    dp.recv_src[r] = reinterpret_cast<std::int32_t*>(m_peers[r] + m_heap.recv_src);
  }
  dp.rank_prefix_matrix = static_cast<const std::int32_t*>(h.rank_prefix_matrix.data);
  dp.num_warps = a.config.num_warps;
  dp.chunk = a.config.nvl_chunk;
  dp.num_blocks = a.config.num_sms;
  if (cudaError_t rc = k::launch_dispatch(dp, m_stream); rc != cudaSuccess)
    return failure(rc, "cached dispatch");
  auto event = leave(a.order);
  if (!event) return event.error();
  const int rows = h.num_worst_tokens > 0 ? h.num_worst_tokens : h.num_recv_tokens;
  DispatchResult out;
  std::uint8_t* own = m_peers[m_rank];
  out.recv_x = TensorView::matrix(own + m_heap.recv_x, a.x.dtype, rows, hidden);
  if (fp8)
    out.recv_x_scales =
        TensorView::matrix(own + m_heap.recv_scales, DType::fp32, rows, hidden / k::k_scale_block);
  out.recv_src_idx = TensorView::vector(own + m_heap.recv_src, DType::int32, rows);
  out.handle = a.handle;
  out.event = std::move(*event);
  return out;
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
  cp.out_x = m_combined_x;
  cp.out_weights = with_weights ? m_combined_w : nullptr;
  cp.num_warps = a.config.num_warps;
  cp.chunk = a.config.nvl_chunk;
  cp.num_blocks = a.config.num_sms;
  if (cudaError_t rc = k::launch_combine(cp, m_stream); rc != cudaSuccess)
    return failure(rc, "combine");
  auto event = leave(a.order);
  if (!event) return event.error();
  CombineResult out;
  out.combined_x = TensorView::matrix(m_combined_x, DType::bf16, h.num_tokens, hidden);
  if (with_weights)
    out.combined_topk_weights =
        TensorView::matrix(m_combined_w, DType::fp32, h.num_tokens, num_topk);
  out.event = std::move(*event);
  return out;
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
  if (cudaError_t rc = k::launch_barrier(sync(), m_stream); rc != cudaSuccess)
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

}  // namespace

std::size_t Buffer::bytes_needed(const BufferOptions& options, int num_ranks) {
  return heap_layout(options, num_ranks).total;
}

Result<std::unique_ptr<Buffer>> Buffer::create(Bootstrap& bootstrap, const BufferOptions& options) {
  auto buffer = std::make_unique<BufferImpl>();
  EPKIT_TRY(buffer->init(bootstrap, options));
  return std::unique_ptr<Buffer>(std::move(buffer));
}

}  // namespace epkit::ep
