// epkit's expert-parallel engine: DeepEP V1's normal-mode operations
// (layout, dispatch, cached dispatch, combine) over the NVLink domain of one
// node, or across nodes (NVLink inside each, NCCL between them), and its
// low-latency mode (low_latency_dispatch / combine; across nodes on the
// device-driven network leg), in C++ with no PyTorch.
//
// A Buffer spans the ranks of one node (one process per GPU), or of several
// nodes with BufferOptions::ranks_per_node. Every rank calls
// the same operations in the same order, as with a collective. Operations run
// on the Buffer's communication stream; StreamOrder says what they wait for
// and whether the caller's stream waits for them (DeepEP's previous_event and
// async_finish). The protocol, memory layout and ordering rules are in
// docs/ep-engine.md.
//
// Outputs are views into memory the Buffer owns (DeepEP's zero-copy style):
// a dispatch writes straight into the receiving rank's buffer, so there is no
// second copy. A view stays valid until the next operation of the same kind
// on this Buffer (layout, dispatch, combine each own their outputs).
#pragma once

#include <cuda_runtime_api.h>
#include <epkit/result.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace epkit::ep {

enum class DType : std::uint8_t { bf16, fp8_e4m3, fp32, int32, int64, boolean };
std::size_t dtype_size(DType type);
const char* to_string(DType type);

/// A strided view of device memory of rank 1, 2 or 3 (strides in elements).
/// The view never owns the memory. Rank 3 is for the low-latency mode's
/// expert-major outputs ([experts, rows, hidden]).
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::bf16;
  int ndim = 2;
  std::array<std::int64_t, 3> shape{0, 0, 0};
  std::array<std::int64_t, 3> strides{0, 1, 0};

  static TensorView matrix(void* data, DType dtype, std::int64_t rows, std::int64_t cols);
  /// Column-major [rows, cols]: element (i, j) at j * rows + i (DeepEP's FP8
  /// scales, `s.T.contiguous().T`).
  static TensorView column_major(void* data, DType dtype, std::int64_t rows, std::int64_t cols);
  static TensorView vector(void* data, DType dtype, std::int64_t size);
  /// Row-major [d0, d1, d2].
  static TensorView tensor3(void* data, DType dtype, std::int64_t d0, std::int64_t d1,
                            std::int64_t d2);

  /// The first dimension; cols() the last (1 for a vector).
  std::int64_t rows() const { return shape[0]; }
  std::int64_t cols() const { return ndim >= 2 ? shape[static_cast<std::size_t>(ndim - 1)] : 1; }
  std::int64_t numel() const;
  bool empty() const { return data == nullptr; }
  /// Rows contiguous in memory (the last stride is 1).
  bool row_major() const { return ndim == 1 || strides[static_cast<std::size_t>(ndim - 1)] == 1; }
  std::string describe() const;  // "bf16[4096, 7168]"
};

/// The ranks of one node and a way to exchange bytes among them: the engine
/// uses it once, to trade CUDA IPC handles when a Buffer is made. epkit's
/// runtime provides one over its rendezvous store; MPI or torch.distributed
/// users wrap theirs.
class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// Every rank's `mine`, by rank. Blocking, bounded by the implementation.
  virtual Result<std::vector<std::string>> all_gather(const std::string& mine) = 0;
};

/// Kernel settings; every rank must pass the same values.
struct Config {
  /// SMs (one block each) used by the data kernels.
  int num_sms = 24;
  /// Warps per block.
  int num_warps = 32;
  /// 16-byte vectors each lane keeps in flight per pass over a row: more
  /// hides NVLink latency, fewer saves registers. Printed as "NVL chunk".
  int nvl_chunk = 4;

  Result<void> validate() const;
};

/// What an operation waits for and who waits for it. By default the
/// operation waits for `stream` (the caller's compute stream) and `stream`
/// waits for the operation, so the outputs are ready in stream order.
struct StreamOrder {
  cudaStream_t stream = nullptr;
  /// Wait for this event instead of `stream` (DeepEP's previous_event).
  cudaEvent_t previous = nullptr;
  /// Do not make `stream` wait; the caller waits on the returned event.
  bool async = false;
  /// false: the caller drops the returned event, so the operation records a
  /// reusable one and returns none (saves an event creation per call).
  bool want_event = true;
};

/// An owned CUDA event (move-only).
class Event {
 public:
  Event() = default;
  explicit Event(cudaEvent_t event) : m_event(event) {}
  Event(Event&& other) noexcept : m_event(other.m_event) { other.m_event = nullptr; }
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  cudaEvent_t get() const { return m_event; }
  /// Gives the event up to the caller, who destroys it.
  cudaEvent_t release() {
    cudaEvent_t e = m_event;
    m_event = nullptr;
    return e;
  }
  Result<void> wait_on(cudaStream_t stream) const;
  Result<void> synchronize() const;

 private:
  cudaEvent_t m_event = nullptr;
};

struct BufferOptions {
  /// Largest token count any rank passes to layout/dispatch.
  int max_tokens = 4096;
  /// Largest hidden size (elements; BF16 rows of 2 * hidden bytes).
  int max_hidden = 7168;
  int max_topk = 8;
  /// Bytes this Buffer may take on each GPU (DeepEP's num_nvl_bytes); 0 takes
  /// what the sizes above need. Too small is an error naming both figures.
  std::size_t num_bytes = 0;
  /// Bound on every wait for another rank inside a kernel; a rank that
  /// never arrives makes the operation fail with a timeout error naming it.
  double timeout_s = 30.0;
  /// Internode: the Buffer spans nodes of this many ranks (1..8; global rank
  /// = node * ranks_per_node + local rank). Tokens cross the network once
  /// per destination node, to the rank with the same local index, then
  /// NVLink inside the node (DeepEP's hierarchical scheme; the network leg
  /// runs over NCCL). 0 or the world size: one node. See docs/ep-internode.md.
  int ranks_per_node = 0;
  /// Bytes of the low-latency region (DeepEP's num_rdma_bytes with
  /// low_latency_mode): 0 leaves it out and the low-latency calls refuse.
  /// Buffer::low_latency_size_hint says what a shape needs. Across nodes
  /// it needs the device-driven network leg (network_leg emulated_nic for
  /// now); on nccl_host the low-latency calls refuse by name.
  std::size_t low_latency_bytes = 0;
  /// DeepEP's enable_shrink (masking dead ranks out of the low-latency
  /// mode) is not supported: true is refused.
  bool enable_shrink = false;
  /// Internode: what carries the network leg (docs/ep-internode.md).
  /// nccl_host: NCCL's host API, the host waiting for each transfer (any
  /// network NCCL runs on). emulated_nic: the device-driven leg (kernels put
  /// rows and signals; a host thread per rank moves them) over an emulated
  /// NIC, for nodes faked on one host's GPUs (CUDA IPC): its cap and latency
  /// below. On the device-driven leg a cached dispatch and a combine never
  /// wait on the host.
  enum class NetworkLeg { nccl_host, emulated_nic };
  NetworkLeg network_leg = NetworkLeg::nccl_host;
  double emulated_nic_gbps = 50;       ///< each rank's NIC, GB/s (1e9 bytes)
  double emulated_nic_latency_us = 2;  ///< from leaving the source to landing
  /// On the device-driven leg: a cached dispatch forwards each chunk of rows
  /// as it lands and a combine sends each chunk of sums as it is done, the
  /// network leg overlapping the NVLink legs (docs/ep-internode.md). Off:
  /// one after the other. Off by default while an intermittent stall at 4096
  /// tokens on faked nodes is open (docs/ep-internode.md).
  bool overlap_network_leg = false;
  /// On the device-driven leg: dispatch and combine stream through fixed
  /// rings (ring mode), so the Buffer's memory is set by the ring sizes below
  /// and barely moves with the node count, and the outputs are allocated per
  /// call (they live as long as the dispatch's handle). Off: buckets and
  /// forwarding regions sized for every token reaching every node, which
  /// grow with nodes x max_tokens. See docs/ep-internode.md, "Ring mode".
  bool internode_rings = false;
  int ring_channels = 4;        ///< channels; an operation runs 3 blocks of 1024 threads each
  int ring_chunk_rows = 8;      ///< rows a network put carries (1..32)
  int ring_network_rows = 512;  ///< rows a channel's rings hold, shared by the nodes
  int ring_nvl_rows = 256;      ///< rows a local rank's NVLink rings hold, shared by the nodes
  /// Bytes of the output arena, on top of num_bytes: a region of this
  /// rank's heap (Buffer::output_arena) where a caller may place a
  /// dispatch's outputs (DispatchArgs::into) so that the senders write its
  /// rows there directly. 0: none. Intranode Buffers only.
  std::size_t output_arena_bytes = 0;
};

/// The routing of one batch (DeepEP's get_dispatch_layout).
struct Layout {
  TensorView num_tokens_per_rank;    // int32 [ranks]
  TensorView num_tokens_per_expert;  // int32 [experts]
  TensorView is_token_in_rank;       // boolean [tokens, ranks]
  /// int32 [nodes]: tokens with any destination on each node (DeepEP's
  /// num_tokens_per_rdma_rank); internode Buffers only.
  TensorView num_tokens_per_rdma_rank;
  Event event;
};

/// Caller-owned memory a layout writes into instead of the Buffer's own
/// (each optional; the shapes of Layout's views, contiguous): the results
/// need no copy and stay valid as long as the caller keeps that memory.
struct LayoutOutputs {
  TensorView num_tokens_per_rank;
  TensorView num_tokens_per_expert;
  TensorView is_token_in_rank;
  TensorView num_tokens_per_rdma_rank;
  /// topk_idx's dtype [tokens, topk]: a copy of topk_idx, written by the
  /// layout kernel as it reads it (DeepEP V2's handle copy, without a copy
  /// launch of its own).
  TensorView topk_idx_copy;
};

/// Where each of this rank's tokens went; what combine and cached dispatch
/// reuse. Device arrays freed with the handle (the Buffer must outlive it).
class DispatchHandle {
 public:
  virtual ~DispatchHandle() = default;
  int num_tokens = 0;  // this rank's tokens
  int num_ranks = 0;
  int hidden = 0;
  /// Rows this rank received; -1 when the dispatch ran with
  /// num_worst_tokens (never read back to the host).
  int num_recv_tokens = -1;
  int num_worst_tokens = 0;
  /// int32 [ranks, ranks], DeepEP's handle[0]: element (i, j) is the number
  /// of rows rank j received from ranks 0..i.
  TensorView rank_prefix_matrix;
  /// int32 [tokens, ranks]: the row token t got in rank r's receive buffer,
  /// or -1 when it was not sent there.
  TensorView send_row;
  /// Internode: nodes the Buffer spans (1 otherwise), and int32 [ranks], the
  /// inclusive prefix over global source ranks of the rows this rank
  /// received (DeepEP's recv_gbl_rank_prefix_sum: rows from rank r are rows
  /// [prefix[r - 1], prefix[r])). Intranode handles leave it empty: the last
  /// row of rank_prefix_matrix says the same.
  int num_nodes = 1;
  TensorView recv_gbl_rank_prefix_sum;
};

/// Caller memory for a dispatch's results (DispatchArgs::into), each
/// optional, contiguous, of the result's shape and dtype.
struct DispatchOutputs {
  TensorView recv_x;
  TensorView recv_x_scales;
  TensorView recv_topk_idx;
  TensorView recv_topk_weights;
  TensorView recv_src_idx;
  /// int32 [ranks, ranks] (not for a cached dispatch): anywhere in device
  /// memory; the dispatch kernel writes it.
  TensorView rank_prefix_matrix;
};

/// Bits of DispatchResult::written: which of DispatchOutputs' memory holds
/// its result.
enum DispatchOutput : unsigned {
  k_out_recv_x = 1u << 0,
  k_out_recv_x_scales = 1u << 1,
  k_out_recv_topk_idx = 1u << 2,
  k_out_recv_topk_weights = 1u << 3,
  k_out_recv_src_idx = 1u << 4,
  k_out_rank_prefix_matrix = 1u << 5,
};

struct DispatchArgs {
  /// BF16 [tokens, hidden], or FP8 E4M3 [tokens, hidden] with x_scales.
  TensorView x;
  /// FP32 [tokens, hidden / 128], row- or column-major; FP8 only.
  TensorView x_scales;
  /// int64 or int32 [tokens, topk]; -1 = no expert. Not given for a cached
  /// dispatch.
  TensorView topk_idx;
  /// FP32 [tokens, topk], optional.
  TensorView topk_weights;
  /// From layout() (or computed elsewhere with the same meaning).
  TensorView num_tokens_per_rank;
  TensorView is_token_in_rank;
  TensorView num_tokens_per_expert;
  /// Given: a cached dispatch (x and scales only, same routing).
  std::shared_ptr<const DispatchHandle> handle;
  /// Per-expert receive counts are rounded up to a multiple of this.
  int expert_alignment = 1;
  /// > 0: outputs have exactly this many rows (rows past the received ones
  /// have top-k index -1) and the host never waits for the counts, so the
  /// call can be captured in a CUDA graph.
  int num_worst_tokens = 0;
  Config config;
  StreamOrder order;
  /// Optional: asked, once the number of received rows is known and before
  /// any row moves, where the results should go. A result whose memory lies
  /// inside this rank's output arena (Buffer::output_arena) is written
  /// there by the senders themselves: no copy. Other memory is not written
  /// (the result stays in the Buffer, see DispatchResult::written), except
  /// rank_prefix_matrix, written anywhere. An error from it is not fatal:
  /// the dispatch then leaves every result in the Buffer (its peers are
  /// already waiting for it). Intranode Buffers; an internode one ignores it.
  std::function<Result<DispatchOutputs>(std::int64_t rows)> into;
};

struct DispatchResult {
  TensorView recv_x;             // x's dtype [received, hidden]
  TensorView recv_x_scales;      // FP32 [received, hidden / 128], row-major (FP8 only)
  TensorView recv_topk_idx;      // topk_idx's dtype [received, topk]: local expert or -1
  TensorView recv_topk_weights;  // FP32 [received, topk]: 0 where the index is -1
  /// int32 [received]: the token's index on its source rank (intranode;
  /// empty for an internode Buffer, as DeepEP's internode dispatch).
  TensorView recv_src_idx;
  /// Received rows per local expert, each rounded up to expert_alignment.
  /// Empty with num_worst_tokens (see recv_tokens_per_expert).
  std::vector<int> num_recv_tokens_per_expert;
  TensorView recv_tokens_per_expert;  // int32 [local experts] on the device (aligned)
  std::shared_ptr<const DispatchHandle> handle;
  Event event;
  /// DispatchOutput bits: results written into DispatchArgs::into's memory
  /// (the views above then describe it); the others are in the Buffer.
  unsigned written = 0;
};

struct CombineArgs {
  /// BF16 [received, hidden] in the dispatch's receive order (a dispatch's
  /// recv_x itself, or expert outputs in that order).
  TensorView x;
  /// FP32 [received, topk], optional: summed per token like x.
  TensorView topk_weights;
  std::shared_ptr<const DispatchHandle> handle;
  /// Optional BF16 [tokens, hidden] (this rank's tokens), at most two: the
  /// sum starts from them in FP32, bias[0] then bias[1], then the ranks in
  /// order, rounded once (DeepEP's combine bias).
  std::array<TensorView, 2> bias;
  /// Optional caller-owned memory for the results: BF16 [tokens, hidden] and
  /// FP32 [tokens, topk], row-major, rows 16-byte aligned. The combine kernel
  /// writes them there instead of into the Buffer (no copy). Intranode
  /// Buffers; an internode one copies its result there.
  TensorView out_x;
  TensorView out_topk_weights;
  Config config;
  StreamOrder order;
};

struct CombineResult {
  TensorView combined_x;             // BF16 [tokens, hidden]
  TensorView combined_topk_weights;  // FP32 [tokens, topk], when weights were given
  Event event;
};

// ---- Low-latency mode (DeepEP V1's low_latency_dispatch / combine) --------
// Expert-major fixed-size outputs, no host synchronisation, FP8 cast in the
// dispatch, a weighted combine and a receive hook. Semantics, memory and
// protocol: docs/ep-engine.md, "Low-latency mode". Results live in one of two
// buffers the operations use in turn: a result stays valid until the
// low-latency operation two calls later, and a hook must be called before
// that operation is issued.

/// Where a low-latency dispatch put what it received (DeepEP's handle:
/// src_info, layout_range and the shape); what the combine sends back along.
/// Views into the Buffer's low-latency region.
struct LowLatencyHandle {
  /// int32 [local experts, ranks * max tokens]: the row's token index on its
  /// source rank (valid rows only, see recv_count).
  TensorView src_info;
  /// int64 [local experts, ranks]: (first row << 32) | rows, per source rank.
  TensorView layout_range;
  TensorView recv_count;  // int32 [local experts]
  int num_max_dispatch_tokens_per_rank = 0;
  int hidden = 0;
  int num_experts = 0;
  int num_ranks = 0;
  int num_topk = 0;
  int buffer = 0;  // which of the two buffers the dispatch used
};

/// The receive half of a low-latency operation called with
/// return_recv_hook: calling it launches the receive kernel on the Buffer's
/// stream after the caller's stream and makes the caller's stream wait for
/// it (the StreamOrder of the operation). Callable once.
class LowLatencyHook {
 public:
  LowLatencyHook() = default;
  explicit LowLatencyHook(std::function<Result<void>()> receive) : m_receive(std::move(receive)) {}
  explicit operator bool() const { return static_cast<bool>(m_receive); }
  Result<void> operator()();

 private:
  std::function<Result<void>()> m_receive;
};

struct LowLatencyDispatchArgs {
  TensorView x;         // BF16 [tokens, hidden], rows 16-byte aligned
  TensorView topk_idx;  // int64 or int32 [tokens, topk], row-major; -1 = no expert
  /// Every rank passes the same two (and the same hidden).
  int num_max_dispatch_tokens_per_rank = 0;
  int num_experts = 0;
  bool use_fp8 = true;
  bool round_scale = false;  // scales rounded up to powers of two
  bool use_ue8m0 = false;    // packed exponent scales (needs round_scale)
  /// Optional int32 [local experts]: recv_count is added to it.
  TensorView cumulative_local_expert_recv_stats;
  /// Optional int64 [ranks]: SM clock cycles spent waiting per source rank.
  TensorView dispatch_wait_recv_cost_stats;
  bool return_recv_hook = false;
  /// Blocks of the kernels (1024 threads each): every rank's must be
  /// resident at once, so ranks sharing a GPU need num_sms x ranks <= SMs.
  int num_sms = 24;
  StreamOrder order;
};

struct LowLatencyDispatchResult {
  /// [local experts, ranks * max tokens, hidden]: BF16, or FP8 E4M3.
  TensorView recv_x;
  /// FP8: fp32 [local experts, rows, hidden / 128] with strides
  /// {hidden / 128 * rows, 1, rows} (column-major per expert); with use_ue8m0
  /// int32 [local experts, rows, hidden / 512], four exponent bytes each.
  TensorView recv_x_scales;
  TensorView recv_count;  // int32 [local experts]: valid rows of each expert
  LowLatencyHandle handle;
  Event event;
  LowLatencyHook hook;  // set with return_recv_hook
};

struct LowLatencyCombineArgs {
  /// BF16 [local experts, ranks * max tokens, hidden] (rows 16-byte aligned):
  /// the expert outputs in the dispatch's layout. May be empty with zero_copy.
  TensorView x;
  TensorView topk_idx;      // this rank's, as given to the dispatch
  TensorView topk_weights;  // fp32 [tokens, topk], row-major
  LowLatencyHandle handle;
  /// The input was written into get_next_low_latency_combine_buffer().
  bool zero_copy = false;
  /// DeepEP's LogFMT-10 combine: not supported, true is refused.
  bool use_logfmt = false;
  bool return_recv_hook = false;
  /// Optional BF16 [tokens, hidden]: the result is written here.
  TensorView out;
  /// Optional int64 [ranks]: SM clock cycles spent waiting per source rank.
  TensorView combine_wait_recv_cost_stats;
  int num_sms = 24;
  StreamOrder order;
};

struct LowLatencyCombineResult {
  TensorView combined_x;  // BF16 [tokens, hidden]: `out`, or a view into the region
  Event event;
  LowLatencyHook hook;
};

/// One block of rows to copy: `rows` rows of `row_bytes` bytes, each
/// `src_stride` / `dst_stride` bytes apart. What a binding uses to hand a
/// Buffer's outputs to memory the caller owns.
struct CopySpan {
  const void* src = nullptr;
  std::int64_t src_stride = 0;
  void* dst = nullptr;
  std::int64_t dst_stride = 0;
  std::int64_t rows = 0;
  std::int64_t row_bytes = 0;
};
/// Copies every span on `stream` with one kernel launch per 8 spans (a
/// cudaMemcpy per output costs a launch's host time each).
Result<void> copy_spans(const CopySpan* spans, int count, cudaStream_t stream);

class Buffer {
 public:
  /// Allocates this rank's share on the current CUDA device and maps every
  /// other rank's of its node through CUDA IPC; an internode Buffer
  /// (options.ranks_per_node) also opens the network leg. Collective over
  /// `bootstrap`'s ranks.
  static Result<std::unique_ptr<Buffer>> create(Bootstrap& bootstrap, const BufferOptions& options);
  /// Device bytes one rank takes for these options and rank count (the
  /// heap; internode adds the buckets, received rows and partial sums).
  static std::size_t bytes_needed(const BufferOptions& options, int num_ranks);
  virtual ~Buffer() = default;

  virtual int rank() const = 0;
  virtual int num_ranks() const = 0;
  /// Nodes the Buffer spans: 1 for an intranode Buffer.
  virtual int num_nodes() const { return 1; }
  /// The network leg ("NCCL 2.28.9 (libnccl.so.2), one communicator of 2
  /// ranks per rail"); empty for an intranode Buffer.
  virtual std::string network() const { return {}; }
  virtual cudaStream_t comm_stream() const = 0;

  /// `into`: caller memory for the results (see LayoutOutputs); results not
  /// given there are views into the Buffer.
  virtual Result<Layout> layout(const TensorView& topk_idx, int num_experts,
                                const StreamOrder& order, const LayoutOutputs& into = {}) = 0;
  virtual Result<DispatchResult> dispatch(const DispatchArgs& args) = 0;
  virtual Result<CombineResult> combine(const CombineArgs& args) = 0;
  /// Where to write a combine's input (expert outputs in receive order) so
  /// that the combine reads it in place: BF16 [rows, hidden] and, for the
  /// weights, FP32 [rows, topk] inside this rank's heap. A combine input
  /// elsewhere is first copied there (a local copy of every row). In ring
  /// mode (BufferOptions::internode_rings) the combine reads its input
  /// anywhere; this is a staging area grown to the largest size asked,
  /// and a larger request moves it (views from earlier calls then end).
  virtual Result<TensorView> combine_input(std::int64_t rows, std::int64_t hidden) = 0;
  virtual Result<TensorView> combine_weights_input(std::int64_t rows, std::int64_t topk) = 0;
  /// The output arena (BufferOptions::output_arena_bytes) inside this
  /// rank's heap, for a caller's allocator of dispatch outputs
  /// (DispatchArgs::into). {nullptr, 0} when the Buffer has none.
  struct Region {
    void* data = nullptr;
    std::size_t bytes = 0;
  };
  virtual Region output_arena() const { return {}; }
  /// A barrier over the ranks on the communication stream, bounded by the
  /// timeout. Waits for its completion on the host.
  virtual Result<void> barrier() = 0;
  /// Waits for everything queued on the communication stream. A kernel that
  /// gave up on a rank leaves the reason in a host-mapped mailbox; this turns
  /// it into an error naming the rank (a plain CUDA call would only say
  /// "unspecified launch failure").
  virtual Result<void> synchronize() = 0;

  /// Low-latency mode (see LowLatencyDispatchArgs). Buffers without the
  /// region, and internode Buffers for now, refuse these calls.
  virtual Result<LowLatencyDispatchResult> low_latency_dispatch(const LowLatencyDispatchArgs& args);
  virtual Result<LowLatencyCombineResult> low_latency_combine(const LowLatencyCombineArgs& args);
  /// Where the next low-latency combine reads a zero-copy input: BF16
  /// [local experts, ranks * max tokens, hidden] inside the region.
  virtual Result<TensorView> get_next_low_latency_combine_buffer(const LowLatencyHandle& handle);
  /// Barrier, zeroes the region's flags and epochs, barrier; waits for it on
  /// the host. Collective.
  virtual Result<void> clean_low_latency_buffer(int num_max_dispatch_tokens_per_rank, int hidden,
                                                int num_experts);
  /// Bytes of BufferOptions::low_latency_bytes that this shape needs.
  static std::size_t low_latency_size_hint(int num_max_dispatch_tokens_per_rank, int hidden,
                                           int num_ranks, int num_experts);
};

}  // namespace epkit::ep
