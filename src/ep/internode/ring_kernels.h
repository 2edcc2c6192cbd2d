// Ring mode: the internode dispatch and combine through fixed rings
// (BufferOptions::internode_rings; docs/ep-internode.md, "Ring mode"). The
// Buffer's memory is set by the ring sizes, not by nodes x max_tokens:
// rows cross the network leg as chunks through a credit ring per (channel,
// node pair), are forwarded over NVLink through a sub-ring per (channel,
// forwarder, source node) at each destination, and land in outputs the
// dispatch allocates per call. One kernel per operation runs the three
// roles of every channel at once (a block each): senders, forwarders,
// receivers. Counts travel first, as one message from every rank to every
// rank over the leg (ring_notify), read and checked on the device.
#pragma once

#include <cstdint>

#include "ep/core/kernels.h"
#include "ep/internode/kernels.h"
#include "ep/network_leg/leg.h"

namespace epkit::ep::kernels {

/// Channels a ring-mode Buffer may run (a count per (rank, channel) sits in
/// the count phase's shared memory).
constexpr int k_ring_max_channels = 32;

/// The shape every rank of a ring-mode Buffer shares, and where each ring,
/// counter and message sits (byte offsets in the Buffer's leg window, or in
/// the node's NVLink area; signal indices in the leg's signal array).
struct RingShape {
  int nodes = 1;
  int per_node = 1;
  int node = 0;
  int local = 0;
  int channels = 1;
  int chunk_rows = 8;  ///< rows a network put carries
  int net_chunks = 2;  ///< chunks a network ring holds (per channel and node pair)
  int nvl_slots = 2;   ///< rows an NVLink sub-ring holds
  int slot_pitch = 0;  ///< bytes of a ring row: the widest packed row
  int message_ints = 0;
  int experts_per_rank = 0;
  int max_tokens = 0;
  EPKIT_HOST_DEVICE int ranks() const { return nodes * per_node; }
  /// What the kernels can run: nodes within a block's 32 warps (a warp a
  /// source node), whole chunks of at most a warp's 32 rows, rings of at
  /// least two chunks, and a leg whose producers move the bytes.
  bool launchable(const network_leg::DeviceLeg& leg) const {
    return nodes >= 1 && nodes <= 32 && per_node >= 1 && per_node <= k_max_ranks && channels >= 1 &&
           channels <= k_ring_max_channels && chunk_rows >= 1 && chunk_rows <= 32 &&
           net_chunks >= 2 && nvl_slots >= 1 && slot_pitch % 16 == 0 && leg.grants != nullptr;
  }
  EPKIT_HOST_DEVICE int rank() const { return node * per_node + local; }
  EPKIT_HOST_DEVICE std::uint64_t chunk_bytes() const {
    return static_cast<std::uint64_t>(chunk_rows) * static_cast<std::uint64_t>(slot_pitch);
  }
  EPKIT_HOST_DEVICE std::uint64_t ring_bytes() const { return net_chunks * chunk_bytes(); }

  // The leg window: send rings [channel][node], receive rings
  // [channel][source node] (the own node's ring is local: the sender writes
  // its receive slots directly), count messages received (two phases in
  // turn) and sent.
  std::uint64_t net_send = 0;
  std::uint64_t net_recv = 0;
  std::uint64_t messages_in = 0;
  std::uint64_t messages_out = 0;
  EPKIT_HOST_DEVICE std::uint64_t send_slot(int c, int m, std::uint64_t message) const {
    return net_send + (static_cast<std::uint64_t>(c) * nodes + m) * ring_bytes() +
           (message % net_chunks) * chunk_bytes();
  }
  EPKIT_HOST_DEVICE std::uint64_t recv_slot(int c, int from, std::uint64_t message) const {
    return net_recv + (static_cast<std::uint64_t>(c) * nodes + from) * ring_bytes() +
           (message % net_chunks) * chunk_bytes();
  }
  EPKIT_HOST_DEVICE std::uint64_t message_in(int phase, int source) const {
    return messages_in +
           (static_cast<std::uint64_t>(phase & 1) * ranks() + source) * message_ints * 4;
  }
  EPKIT_HOST_DEVICE std::uint64_t message_out(int dest) const {
    return messages_out + static_cast<std::uint64_t>(dest) * message_ints * 4;
  }

  // Signals: a count message's arrival per source rank, a tail per (channel,
  // source node, chunk slot) at the receiver, a credit per (channel,
  // destination node) at the sender.
  EPKIT_HOST_DEVICE std::uint32_t message_signal(int source) const {
    return static_cast<std::uint32_t>(source);
  }
  EPKIT_HOST_DEVICE std::uint32_t tail_signal(int c, int from, std::uint64_t message) const {
    return static_cast<std::uint32_t>(ranks() + (c * nodes + from) * net_chunks +
                                      static_cast<int>(message % net_chunks));
  }
  EPKIT_HOST_DEVICE std::uint32_t credit_signal(int c, int to) const {
    return static_cast<std::uint32_t>(ranks() + channels * nodes * net_chunks + c * nodes + to);
  }
  EPKIT_HOST_DEVICE std::uint32_t num_signals() const {
    return static_cast<std::uint32_t>(ranks() + channels * nodes * (net_chunks + 1));
  }

  // Message ints: the phase number first and last, rows to the receiver
  // per channel, rows to the receiver's node per channel (its stream from
  // the sender), tokens per expert of the receiver.
  EPKIT_HOST_DEVICE int msg_rows(int c) const { return 1 + c; }
  EPKIT_HOST_DEVICE int msg_node_rows(int c) const { return 1 + channels + c; }
  EPKIT_HOST_DEVICE int msg_experts(int e) const { return 1 + 2 * channels + e; }
  EPKIT_HOST_DEVICE static int min_message_ints(int channels, int experts_per_rank) {
    return 2 + 2 * channels + experts_per_rank;
  }

  // The NVLink area (in every node rank's shared heap, the same layout):
  // sub-ring (c, writer w, source node n) at its reader, [channel][writer
  // local rank][source node] rows of slot_pitch; the tails there (written
  // by the writer); the heads at the writer, [channel][reader][source node]
  // (written by the reader).
  EPKIT_HOST_DEVICE int sub_ring(int c, int other, int n) const {
    return (c * per_node + other) * nodes + n;
  }
  EPKIT_HOST_DEVICE int sub_rings() const { return channels * per_node * nodes; }
  EPKIT_HOST_DEVICE std::uint64_t nvl_slot(int ring, std::uint64_t row) const {
    return (static_cast<std::uint64_t>(ring) * nvl_slots + row % nvl_slots) * slot_pitch;
  }
  EPKIT_HOST_DEVICE std::uint64_t nvl_tails() const {
    return static_cast<std::uint64_t>(sub_rings()) * nvl_slots * slot_pitch;
  }
  EPKIT_HOST_DEVICE std::uint64_t nvl_heads() const { return nvl_tails() + sub_rings() * 8ull; }
  EPKIT_HOST_DEVICE std::uint64_t nvl_bytes() const { return nvl_heads() + sub_rings() * 8ull; }
};

/// Running counts each ring's ends keep across calls (device memory, so a
/// captured call replays with the next values), each owned by one role of
/// one channel: messages sent per (channel, node), chunks received and
/// credited per (channel, source node), NVLink rows written and read per
/// sub-ring, the count phases, and per (channel, node, slot) the rows
/// written into a send chunk (filling) and read from a receive chunk
/// (draining, and drained: which message a slot last finished). A
/// combine's receivers finish chunks out of order and credit them in order
/// (net_credited is then their shared pointer).
struct RingCounters {
  std::uint64_t* net_sent = nullptr;      // [C][N]
  std::uint64_t* net_received = nullptr;  // [C][N]
  std::uint64_t* net_credited = nullptr;  // [C][N]
  std::uint64_t* nvl_written = nullptr;   // [C][G][N] by sub_ring(c, reader, n)
  std::uint64_t* nvl_read = nullptr;      // [C][G][N] by sub_ring(c, writer, n)
  std::uint64_t* phase = nullptr;         // [1] count phases so far
  std::int32_t* filling = nullptr;        // [C][N][net_chunks]
  std::int32_t* draining = nullptr;       // [C][N][net_chunks]
  std::uint64_t* drained = nullptr;       // [C][N][net_chunks]: message + 1 once read
};

/// What a ring-mode dispatch keeps for its cached dispatches and combine
/// (the handle's device memory).
struct RingRoutes {
  std::int32_t* send_row = nullptr;    // [tokens][N]: row in the node's stream, all channels
  std::int32_t* chan_first = nullptr;  // [C + 1][N]: the node's stream rows before channel c
  /// The forwarder's view: rows of source node n's stream in channel c
  /// (stream[c][n]), where channel c's rows start (stream_first[(C + 1)][n])
  /// and each row's local ranks (mask[n][stream_first + row], a bit each).
  std::int32_t* stream = nullptr;
  std::int32_t* stream_first = nullptr;
  std::uint8_t* mask = nullptr;
  /// The receiver's view: rows from source rank s in channel c
  /// (from_rank[s][c]) and their first output row (base[s][c]; base[R][0]
  /// the total), and the global prefix over source ranks (inclusive).
  std::int32_t* from_rank = nullptr;
  std::int32_t* base = nullptr;
  std::int32_t* gbl_prefix = nullptr;
  std::int32_t* per_expert = nullptr;  // [experts_per_rank], aligned
  int num_tokens = 0;
};

/// The count phase: every rank puts one message to every rank (its own is
/// a local copy), waits for all of them (bounded, naming the sender), checks
/// each (ring_messages.h) and derives its routes. `host_totals` (host-mapped,
/// optional, for a dispatch that sizes its outputs; the host reads it once
/// the kernel has ended): [0] rows received, [1] the phase, [2 + e] local
/// expert e's rows, aligned.
struct RingNotifyParams {
  RingShape shape;
  network_leg::DeviceLeg leg;
  RingCounters counters;
  RingRoutes routes;
  const bool* is_token_in_rank = nullptr;  // [tokens][ranks]
  std::int64_t in_rank_stride = 0;
  const std::int32_t* num_tokens_per_expert = nullptr;  // [experts], the layout's
  std::uint8_t* window = nullptr;                       // the leg window, this rank's
  int num_tokens = 0;
  int expert_alignment = 1;
  int num_worst_tokens = 0;
  std::int32_t* recv_tokens_per_expert = nullptr;  // out [experts_per_rank]
  volatile std::int32_t* host_totals = nullptr;
  std::int64_t timeout_ns = 0;
  Mailbox* mailbox = nullptr;
};
cudaError_t launch_ring_notify(const RingNotifyParams& p, cudaStream_t stream);

/// A cached dispatch's and a combine's notify step (they need no count
/// phase): a peer whose process the leg saw exit stops the call at once,
/// named, instead of after a ring's timeout. Its own kernel, as DeepEP's
/// cached_notify is, so that its test's profiler finds one `notify` kernel
/// beside the data kernel in every operation.
cudaError_t launch_ring_notify_alive(const network_leg::DeviceLeg& leg, Mailbox* mailbox,
                                     cudaStream_t stream);

/// One dispatch (or cached dispatch) through the rings: 3 x channels blocks.
struct RingDispatchParams {
  RingShape shape;
  network_leg::DeviceLeg leg;
  RingCounters counters;
  RingRoutes routes;
  RowFormat format;
  bool cached = false;  ///< x and scales only; masks from the routes
  std::uint8_t* window = nullptr;
  std::uint8_t* nvl[k_max_ranks] = {};  // every node rank's NVLink area (mapped)
  // Inputs (as PackParams).
  const std::uint8_t* x = nullptr;
  std::int64_t x_stride = 0;
  const float* scales = nullptr;
  std::int64_t scale_stride_token = 0;
  std::int64_t scale_stride_hidden = 0;
  const void* topk = nullptr;
  std::int64_t topk_stride = 0;
  const float* weights = nullptr;
  std::int64_t weights_stride = 0;
  const bool* is_token_in_rank = nullptr;
  std::int64_t in_rank_stride = 0;
  // Outputs, rows in global source rank then token order.
  std::uint8_t* recv_x = nullptr;
  float* recv_scales = nullptr;  // [rows][num_scales]
  void* recv_topk = nullptr;     // format's index width, local experts
  float* recv_weights = nullptr;
  int num_worst_tokens = 0;  ///< > 0: rows past the received ones padded
  std::int64_t timeout_ns = 0;
  std::int64_t nvl_timeout_ns = 0;  ///< longer: a forwarder may wait on the network first
  Mailbox* mailbox = nullptr;
  std::uint64_t* profile = nullptr;  ///< as RingCombineParams::profile
};
cudaError_t launch_ring_dispatch(const RingDispatchParams& p, cudaStream_t stream);

/// One combine through the same rings, backwards.
struct RingCombineParams {
  RingShape shape;
  network_leg::DeviceLeg leg;
  RingCounters counters;
  RingRoutes routes;
  std::uint8_t* window = nullptr;
  std::uint8_t* nvl[k_max_ranks] = {};
  int hidden = 0;
  int num_topk = 0;                  ///< 0: no weights
  int row_bytes = 0;                 ///< a partial row: 2 x hidden + 4 x num_topk, 16-aligned
  const std::uint16_t* x = nullptr;  // BF16 [received][hidden]
  std::int64_t x_stride = 0;         // elements
  const float* weights = nullptr;    // [received][num_topk]
  std::int64_t weights_stride = 0;
  const std::uint16_t* bias[2] = {};
  std::int64_t bias_stride[2] = {};
  std::uint16_t* out_x = nullptr;  // BF16 [tokens][hidden]
  float* out_w = nullptr;
  std::int64_t timeout_ns = 0;
  std::int64_t nvl_timeout_ns = 0;
  Mailbox* mailbox = nullptr;
  /// Optional (InternodeBuffer::set_ring_profile, a test's): per block, eight
  /// words (ring_device.cuh, ProfileWord): its start and end (global timer,
  /// ns), then the ns its lanes spent waiting for NVLink rows or room, for
  /// network room (credits), in puts, waiting for network chunks, and of the
  /// puts' time waiting for the leg's grant; then how many puts it made.
  std::uint64_t* profile = nullptr;
};
cudaError_t launch_ring_combine(const RingCombineParams& p, cudaStream_t stream);

/// What a wait of ring mode was for (the low byte of a k_timeout_network
/// value, after the leg exchange's 0..2).
enum RingWait : int {
  k_ring_wait_message = 3,   ///< a count message
  k_ring_wait_chunk = 4,     ///< a network chunk
  k_ring_wait_credit = 5,    ///< room in a network ring
  k_ring_wait_nvl_rows = 6,  ///< rows in an NVLink sub-ring
  k_ring_wait_nvl_room = 7,  ///< room in an NVLink sub-ring
  k_ring_wait_put = 16,      ///< the leg took no put (bit 8 is k_leg_wait_exited)
};

}  // namespace epkit::ep::kernels
