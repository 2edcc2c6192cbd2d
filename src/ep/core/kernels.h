// What every mode's kernels share (plain C++17: included by the host side
// and by the .cu files): the heap layout each rank maps from every other
// rank, the host-mapped mailbox, the barrier, the layout and staging kernels.
// Each mode declares its own kernels in its folder (ep/intranode/kernels.h).
//
// Every rank maps every other rank's heap (CUDA IPC), so a kernel holds one
// pointer per rank for each region. The protocol and the memory ordering are
// described in docs/ep-engine.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#ifdef __CUDACC__
#define EPKIT_HOST_DEVICE __host__ __device__
#else
#define EPKIT_HOST_DEVICE
#endif

namespace epkit::ep::kernels {

constexpr int k_max_ranks = 8;  // ranks of one node (the NVLink domain)
constexpr int k_max_nodes = 32;
/// Ranks a layout spans: nodes x ranks of a node.
constexpr int k_max_global_ranks = k_max_nodes * k_max_ranks;
constexpr int k_max_experts = 1024;
constexpr int k_scale_block = 128;  // FP8 channels per scale

/// Written by peers into this rank's heap (start of it): one signal per
/// source rank, the count matrix rows and the per-expert counts for this
/// rank's experts, and what this rank publishes for a combine.
struct alignas(256) Meta {
  std::uint64_t signal[k_max_ranks];
  std::int32_t counts[k_max_ranks][k_max_ranks];           // [src][dst], src's row
  std::int32_t expert_counts[k_max_ranks][k_max_experts];  // [src][local expert]
  // Internode forwarding: rows a forwarder (the first index) sends to each
  // rank of this node, per source node, so that every destination orders its
  // rows by global source rank. Each forwarder writes its slice to every rank.
  std::int32_t seg_counts[k_max_ranks][k_max_nodes][k_max_ranks];  // [forwarder][node][dst]
  // Set by a peer of this node (through its host) when it gave up on a rank
  // elsewhere: that rank + 1. A barrier waiting for the peer names that rank.
  std::int32_t blame;
  // Published by this rank before a combine's entry barrier.
  std::int64_t combine_x_offset;
  std::int64_t combine_x_stride;  // bytes
  std::int64_t combine_w_offset;  // -1: no weights
  std::int64_t combine_w_stride;  // elements
  // Published by this rank before an intranode dispatch's entry barrier:
  // where in its heap the senders write each result (DispatchField order),
  // the Buffer's receive regions or the caller's tensors in the arena.
  std::int64_t dispatch_offsets[5];
};

/// The results a dispatch writes into each destination (Meta::dispatch_offsets).
enum DispatchField : int { k_field_x, k_field_scales, k_field_topk, k_field_weights, k_field_src };
constexpr int k_dispatch_fields = 5;

/// Host-mapped: how kernels tell the host the counts (no cudaMemcpy, no
/// device sync) and why they stopped.
struct Mailbox {
  volatile std::uint64_t counts_epoch;  // set last, after the counts
  volatile std::int32_t num_recv;
  volatile std::int32_t expert_counts[k_max_experts];  // aligned
  volatile std::int32_t error;                         // ErrorKind below, 0 = none
  volatile std::int32_t error_rank;                    // the rank waited for
  volatile std::int64_t error_value;
  volatile std::int32_t claimed;  // set by the first kernel that fails
};

enum ErrorKind : std::int32_t {
  k_no_error = 0,
  k_timeout_barrier = 1,      // a rank never reached a barrier
  k_bad_expert = 2,           // topk index outside [-1, num_experts): value, token in error_rank
  k_worst_too_small = 3,      // received more rows than num_worst_tokens: value = rows
  k_timeout_local = 4,        // a block waited for another block of its grid
  k_peer_blamed = 5,          // a peer of this node gave up on error_rank (a global rank)
  k_timeout_low_latency = 6,  // a low-latency wait for error_rank; value: what (LowLatencyWait)
  k_timeout_network = 7,      // the device-driven network leg waited for error_rank (a global
                              // rank); value: 0 its ready signal, 1 its rows, 2 this rank's flush,
                              // plus k_leg_wait_exited when error_rank's process exited
  k_bad_leg_message = 8,      // a count message on the device-driven leg failed its check:
                              // error_rank sent it; value: the fault (internode/leg_counts.h)
};
/// Added to a k_timeout_network value's wait: the wait ended because the
/// rank named had exited (network_leg::DeviceLeg::exited), not on a timeout.
constexpr std::int64_t k_leg_wait_exited = 8;

/// Chunks a segment of `rows` rows is cut into on the network leg: chunk c
/// is rows [chunk_begin(c), chunk_begin(c + 1)), every chunk within one row
/// of the others (empty ones when rows < chunks). Both ends compute them.
EPKIT_HOST_DEVICE inline int chunk_begin(int c, int rows, int chunks) {
  return static_cast<int>(static_cast<std::int64_t>(c) * rows / chunks);
}
/// The chunk row j (0 <= j < rows) is in: the last c with chunk_begin(c) <= j.
EPKIT_HOST_DEVICE inline int chunk_of(int j, int rows, int chunks) {
  return static_cast<int>(((static_cast<std::int64_t>(j) + 1) * chunks - 1) / rows);
}

/// Rows that cross the network leg chunk by chunk while a kernel of the
/// node's Buffer works on them (an internode dispatch's forwarding starts on
/// the chunks that arrived; its combine's sums leave as their chunks are
/// done). Segment s, rows [segment_begin[s], segment_begin[s + 1]), is node
/// s's; `own` is this node's, which does not cross the leg.
struct LegChunks {
  const std::int32_t* segment_begin = nullptr;  ///< device [num_segments + 1]; null: off
  int num_segments = 0;
  int own = -1;
  int chunks = 0;
  /// Arrival (a dispatch): chunk c of segment s has landed once
  /// signals[first_signal + s x signal_stride + c] reaches *number.
  const std::uint64_t* signals = nullptr;
  std::uint32_t first_signal = 0;
  std::uint32_t signal_stride = 0;
  const std::uint64_t* number = nullptr;
  std::int64_t timeout_ns = 0;
  /// network_leg::DeviceLeg::exited (may be null): a rank whose process
  /// exited, named by the wait instead of the node it waited for.
  const std::uint64_t* exited = nullptr;
  /// Node s's rank on this rail (a wait that expires names it).
  int ranks_per_node = 1;
  int local_rank = 0;
  /// Departure (a combine): done[s x chunks + c] counts the chunk's rows
  /// written; the leg's exchange takes the chunk when it is complete.
  std::int32_t* done = nullptr;
};

/// What every synchronising kernel shares.
struct SyncParams {
  int rank = 0;
  int num_ranks = 1;
  std::uint64_t* signal[k_max_ranks] = {};  // rank r's Meta.signal (mapped)
  std::uint64_t timeout_ns = 0;
  Mailbox* mailbox = nullptr;            // device pointer of the host-mapped mailbox
  unsigned int* grid_counter = nullptr;  // local, zero between kernels
  /// Local: the last barrier epoch this rank passed. Kernels read it at
  /// their start and the last block of the last kernel of an operation
  /// advances it, so epochs live on the device and a captured CUDA graph
  /// replays with fresh ones. Every rank runs the same kernels in the same
  /// order, so every rank's counter takes the same values.
  std::uint64_t* epoch = nullptr;
  /// This rank's Meta.blame (see there); read while waiting in a barrier.
  const std::int32_t* blame = nullptr;
};

struct LayoutParams {
  const void* topk = nullptr;
  bool topk_int64 = true;
  std::int64_t topk_stride = 0;  // elements between tokens
  int num_tokens = 0;
  int num_topk = 0;
  int num_experts = 0;
  int num_ranks = 1;
  /// > 0: ranks form nodes of this many and num_tokens_per_node counts the
  /// tokens with any destination rank on each node (DeepEP's
  /// num_tokens_per_rdma_rank).
  int ranks_per_node = 0;
  std::int32_t* num_tokens_per_node = nullptr;  // [ranks / ranks_per_node], zeroed by the launcher
  std::int32_t* num_tokens_per_rank = nullptr;  // [ranks], zeroed by the launcher
  std::int32_t* num_tokens_per_expert = nullptr;  // [experts], zeroed by the launcher
  bool* is_token_in_rank = nullptr;               // [tokens, ranks]
  void* topk_copy = nullptr;                      // optional, topk's dtype [tokens, topk], packed
  Mailbox* mailbox = nullptr;
};
cudaError_t launch_layout(const LayoutParams& p, cudaStream_t stream);

/// Copies rows [0, rows) (rows read from rank_prefix_matrix[last row][rank]
/// when `rows_from` is set) of a strided matrix into a packed one: a
/// combine's input that is not inside the heap goes to the staging region.
struct StageParams {
  const std::uint8_t* src = nullptr;
  std::int64_t src_stride = 0;  // bytes
  std::uint8_t* dst = nullptr;
  int row_bytes = 0;  // multiple of 4
  int rows = 0;
  const std::int32_t* rows_from = nullptr;  // device count, overrides rows
  const std::int32_t* dst_row = nullptr;    // device: dst starts this many rows further
  int num_blocks = 24;
};
cudaError_t launch_stage(const StageParams& p, cudaStream_t stream);

/// A barrier over the ranks (one block), optionally publishing where this
/// rank's combine input lives first (what the combine kernel does at its
/// entry when it runs the barrier itself).
struct PeerNotifyParams {
  SyncParams sync;
  Meta* publish = nullptr;  // this rank's Meta, or null: a plain barrier
  std::int64_t x_offset = 0;
  std::int64_t x_stride = 0;
  std::int64_t w_offset = -1;
  std::int64_t w_stride = 0;
};
cudaError_t launch_notify_peers(const PeerNotifyParams& p, cudaStream_t stream);

// The low-latency region's header and its wait codes: every heap holds the
// region (HeapLayout::low_latency) and the mailbox reports its timeouts, so
// the Buffer that owns the heap reads them without the mode's kernels.
/// The start of a rank's low-latency region. The first part only the owner
/// touches; the flags are written by the source rank whose index they carry.
/// Ranks a low-latency operation spans: 8 nodes of 8 (an A4 cluster of 64
/// GPUs). The header's flags and the kernels' per-source arrays are this wide.
constexpr int k_low_latency_max_ranks = 64;

struct alignas(256) LowLatencyHeader {
  std::uint64_t epoch;         // the last operation's epoch (advanced by its send)
  std::uint64_t op_epoch[2];   // epoch of the last operation on each buffer
  std::uint32_t grid_counter;  // blocks of the running send that finished
  std::uint32_t reserved0;
  std::uint64_t dispatch_epoch[2];  // epoch of the last dispatch on each buffer
  /// Across nodes: the epoch whose sources block 0 of the receive has seen
  /// arrive, per buffer (dispatch, combine); the other blocks wait on it.
  std::uint64_t dispatch_ready[2];
  std::uint64_t combine_ready[2];
  std::uint64_t count_flag[2][k_low_latency_max_ranks];     // source's counts row is in
  std::uint64_t dispatch_flag[2][k_low_latency_max_ranks];  // source's dispatch rows are in
  std::uint64_t combine_flag[2][k_low_latency_max_ranks];   // source's combine rows are in
};

/// Values of Mailbox::error_value with k_timeout_low_latency: what the
/// kernel waited for.
enum LowLatencyWait : std::int32_t {
  k_low_latency_wait_counts = 1,
  k_low_latency_wait_dispatch = 2,
  k_low_latency_wait_combine = 3,
  /// Not waits: what a hooked dispatch's receive found in a source's slice.
  k_low_latency_overwritten = 4,  // the source's next dispatch wrote it before it was read
  /// The source's counts or token entries are out of range, or its combine
  /// count belongs to another operation.
  k_low_latency_bad_count = 5,
  /// Across nodes: a put to the rank that the network leg refused or did not
  /// carry within the timeout (its NIC stalled, the rank's window is gone).
  k_low_latency_put = 6,
};

}  // namespace epkit::ep::kernels
