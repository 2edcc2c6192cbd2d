// The internode kernels and their launchers: the plan (which of this rank's
// tokens go to which node, the count messages), the pack into per-node
// buckets, and the reduce over nodes that ends a combine. The NVLink legs
// are the intranode kernels (ep/intranode/kernels.h); the network leg is
// ep/internode/network.h. The scheme is in docs/ep-internode.md.
#pragma once

#include <cstdint>

#include "ep/core/kernels.h"
#include "ep/network_leg/leg.h"

namespace epkit::ep::kernels {

/// One token as it crosses the network: packed fields at fixed offsets of a
/// row of `pitch` bytes (a multiple of 16, so every field keeps its
/// alignment in every row). The forwarding rank reads the received rows in
/// place through strided views.
struct RowFormat {
  int pitch = 0;
  int x_bytes = 0;      // at 0
  int topk_offset = 0;  // top-k indices relative to the node's first expert, -1 elsewhere
  int topk_size = 0;    // 8 (int64) or 4 (int32); 0 = no top-k
  int num_topk = 0;
  int scales_offset = 0;  // FP32 [num_scales] (FP8 only)
  int num_scales = 0;
  int weights_offset = 0;  // FP32 [num_topk], when weights are given
  bool with_weights = false;
  int src_offset = 0;   // int32: the token's index on its source rank
  int mask_offset = 0;  // bool [ranks_per_node]: the node's ranks the token goes to
  int ranks_per_node = 0;
};

/// What a count message holds, int32 each, per (source rank, destination
/// node), in a slot of `ints` ints: a sequence number first and last (so the
/// host can tell a message of this call from a stale one), the bucket's rows,
/// the tokens for each rank of the node, the tokens for each expert of the
/// node, and (on the device-driven leg) the rows of the sender's bucket for
/// every node: a receiver then knows where every sender's rows land at every
/// node, so each sender can put its rows in place, compactly, by itself.
struct MessageFormat {
  int ranks_per_node = 0;
  int experts_per_node = 0;
  int nodes = 0;  ///< the rows vector's length (the slot is sized for k_max_nodes)
  /// The smallest slot that holds it.
  EPKIT_HOST_DEVICE int min_ints() const { return 3 + ranks_per_node + experts_per_node + nodes; }
  EPKIT_HOST_DEVICE int rows_at() const { return 1; }
  EPKIT_HOST_DEVICE int ranks_at() const { return 2; }
  EPKIT_HOST_DEVICE int experts_at() const { return 2 + ranks_per_node; }
  EPKIT_HOST_DEVICE int rows_vector_at() const { return 2 + ranks_per_node + experts_per_node; }
};

struct PlanParams {
  const bool* is_token_in_rank = nullptr;  // [tokens, ranks]
  std::int64_t is_token_in_rank_stride = 0;
  const std::int32_t* num_tokens_per_rank = nullptr;    // [ranks]
  const std::int32_t* num_tokens_per_expert = nullptr;  // [experts]
  int num_tokens = 0;
  int num_nodes = 0;
  int ranks_per_node = 0;
  int experts_per_node = 0;
  std::int32_t sequence = 0;         // > 0
  std::int32_t* send_row = nullptr;  // out [tokens, nodes]: row in each node's bucket, or -1
  std::int32_t* messages = nullptr;  // out [nodes][message_ints]
  int message_ints = 0;              // the slot: >= MessageFormat::min_ints()
};
/// One block per node: the rows of each node's bucket, in token order.
cudaError_t launch_plan(const PlanParams& p, cudaStream_t stream);

struct PackParams {
  RowFormat format;
  const std::int32_t* send_row = nullptr;  // [tokens, nodes]
  int num_tokens = 0;
  int num_nodes = 0;
  int experts_per_node = 0;
  const std::uint8_t* x = nullptr;
  std::int64_t x_stride = 0;  // bytes
  const float* scales = nullptr;
  std::int64_t scale_stride_token = 0;
  std::int64_t scale_stride_hidden = 0;
  /// false: a cached dispatch (x and scales only; the rest is in place).
  bool with_routing = true;
  const void* topk = nullptr;  // optional
  std::int64_t topk_stride = 0;
  const float* weights = nullptr;
  std::int64_t weights_stride = 0;
  const bool* is_token_in_rank = nullptr;
  std::int64_t is_token_in_rank_stride = 0;
  /// Optional: thread 0 adds one. The count of rows exchanges the
  /// forwarding reads (LegChunks::number): a kernel launched after the pack,
  /// so it sees this call's number whenever the exchange itself runs.
  std::uint64_t* leg_number = nullptr;
  /// Optional (a cached dispatch overlapping the leg): every row packed for
  /// another node is counted in its chunk, done[m x chunks + chunk] for
  /// bucket m of rows_to[m] rows (device), as LegPut::done wants it, so each
  /// chunk leaves while the rest is packed.
  std::int32_t* done = nullptr;
  const std::int32_t* rows_to = nullptr;
  int own_node = -1;
  int chunks = 0;
  std::uint8_t* buckets = nullptr;  // node m's bucket at m * bucket_stride
  std::int64_t bucket_stride = 0;
  int num_blocks = 24;
  int num_warps = 32;
};
/// A warp per token: its row goes into the bucket of every node it visits.
cudaError_t launch_pack(const PackParams& p, cudaStream_t stream);

/// Chunks of rows per node on the network leg (LegChunks): a dispatch's
/// bucket and a combine's sums cross in this many puts, so the other side can
/// start on the first while the last is on the wire.
constexpr int k_leg_chunks = 8;

/// One put of a leg exchange, as a rule for every other node n (windows and
/// offsets in bytes, as the network leg addresses them): `bytes` from
/// src_offset + n x src_node_stride to dst_offset. Or sized on the device
/// from a dispatch's checked counts (no host wait): rows[n] x row_bytes, the
/// offsets moving on by src_row[n] and dst_row[n] rows (those given). With
/// chunks > 0 it carries chunk `chunk` of those rows (chunk_begin), and with
/// `done` it leaves only once done[n x chunks + chunk] (this rank's kernel
/// counting the rows it wrote) covers the chunk; the exchange then zeroes it.
struct LegPut {
  std::uint32_t src_window = 0;
  std::uint32_t dst_window = 0;
  std::uint64_t src_offset = 0;
  std::uint64_t src_node_stride = 0;
  std::uint64_t dst_offset = 0;
  std::uint64_t bytes = 0;
  const std::int32_t* rows = nullptr;
  const std::int32_t* src_row = nullptr;
  const std::int32_t* dst_row = nullptr;
  std::uint64_t row_bytes = 0;
  int chunk = 0;
  int chunks = 0;
  std::int32_t* done = nullptr;
};

/// One exchange over the device-driven leg with the rail's other nodes
/// (docs/ep-internode.md, "The device-driven leg in today's Buffer"): for
/// each other node n, tell n this rank is ready to receive the next exchange
/// of this kind, wait until n is ready, post every put (put i adds 1 to
/// signal tail_signal + this node x k_puts + i at n; one of no bytes goes as
/// a bare signal, so every exchange of a kind brings each of its signals up
/// by one), wait until each of n's put signals reaches this exchange's
/// number, and flush, so the sources may be reused by the next call. Every
/// wait is bounded; on expiry the mailbox names the rank of node n
/// (k_timeout_network).
struct LegExchangeParams {
  network_leg::DeviceLeg leg;
  int num_nodes = 0;
  int node = 0;
  int ranks_per_node = 0;
  int local_rank = 0;
  /// Puts per node: a chunk of rows each, and one more (a combine's weights).
  static constexpr int k_puts = k_leg_chunks + 1;
  LegPut puts[k_puts] = {};
  int num_puts = 0;  ///< the same for every exchange of a kind, 0..k_puts
  /// Signals of this kind: ready at ready_signal + source node; put i's at
  /// tail_signal + source node x k_puts + i.
  std::uint32_t ready_signal = 0;
  std::uint32_t tail_signal = 0;
  /// This kind's count of exchanges in device memory (so a captured
  /// exchange replays with the next number): counters[0] the exchanges so
  /// far, counters[1] the blocks of this one done; the last block moves the
  /// number on and zeroes the other.
  std::uint64_t* counters = nullptr;
  std::int64_t timeout_ns = 0;
  Mailbox* mailbox = nullptr;
  /// Count messages (optional): before the puts, every node's message gets
  /// the rows vector (each message's rows, for every node).
  std::int32_t* messages = nullptr;
  int message_ints = 0;
  MessageFormat message_format;
};
cudaError_t launch_leg_exchange(const LegExchangeParams& p, cudaStream_t stream);

struct ReduceParams {
  /// Node m's partial sums for the rows of this rank's bucket m (BF16
  /// [rows, hidden], rows packed) and their weights (FP32 [rows, num_topk]).
  const std::uint16_t* partial_x[k_max_nodes] = {};
  const float* partial_w[k_max_nodes] = {};
  /// Optional, on the device: node m's partials start this many rows into
  /// partial_x[m] and partial_w[m] (this node's own, read at its segment of
  /// the node combine's output when the sizes never reached the host).
  const std::int32_t* first_row[k_max_nodes] = {};
  const std::int32_t* send_row = nullptr;  // [tokens, nodes]
  int num_tokens = 0;
  int num_nodes = 0;
  int hidden = 0;  // multiple of 8
  int num_topk = 0;
  /// Optional BF16 [tokens, hidden] each (strides in elements): the sum
  /// starts at bias_0 + bias_1 in FP32, as DeepEP's combine.
  const std::uint16_t* bias[2] = {};
  std::int64_t bias_stride[2] = {};
  std::uint16_t* out_x = nullptr;  // BF16 [tokens, hidden]
  float* out_w = nullptr;          // [tokens, num_topk] or null
  int num_blocks = 24;
  int num_warps = 32;
  /// On the device-driven leg (optional): node m's partials land in chunks
  /// while this kernel runs, so each token waits for its own. Chunk c of
  /// bucket m (rows_to[m] rows, device) has landed once
  /// signals[first_signal + m x signal_stride + c] reaches this combine's
  /// number, the weights (put `chunks`) likewise. `number`: the reduces so
  /// far ([0], this kernel's own count, in step with the partial exchanges:
  /// the exchange may end before or after this kernel starts) and the
  /// blocks of this one done ([1]).
  const std::uint64_t* signals = nullptr;
  std::uint32_t first_signal = 0;
  std::uint32_t signal_stride = 0;
  const std::int32_t* rows_to = nullptr;
  std::uint64_t* number = nullptr;
  int own_node = -1;
  int chunks = 0;
  std::int64_t timeout_ns = 0;
  const std::uint64_t* exited = nullptr;  // network_leg::DeviceLeg::exited (may be null)
  int ranks_per_node = 1;                 // node m's rank on this rail names a wait that expires
  int local_rank = 0;
  Mailbox* mailbox = nullptr;
};
/// Sums every token's partials in FP32 in node order and rounds once to BF16.
cudaError_t launch_reduce(const ReduceParams& p, cudaStream_t stream);

}  // namespace epkit::ep::kernels
