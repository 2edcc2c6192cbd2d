// The count messages of the device-driven leg read as hostile input, and
// what a dispatch learns from them: one function that the device runs
// (leg_counts.cu, so that a dispatch on the leg never waits on the host for
// its sizes) and that the CPU tests call with crafted messages. Plain C++17.
#pragma once

#include <cstdint>

#include "ep/internode/kernels.h"

namespace epkit::ep::kernels {

/// Where a rank of a rail stands: its node, the rail's nodes, its local rank.
struct RailPlace {
  int node = 0;
  int nodes = 0;
  int ranks_per_node = 1;
  int local_rank = 0;
  EPKIT_HOST_DEVICE int global(int of_node) const { return of_node * ranks_per_node + local_rank; }
};

/// What a dispatch learns from the count messages, kept on the device in
/// the dispatch's handle: cached dispatches and combines size their puts
/// and copies from it.
struct LegCounts {
  std::int32_t rows_to[k_max_nodes];            // rows of this rank's bucket for each node
  std::int32_t rows_from[k_max_nodes];          // rows received from each node
  std::int32_t segment_begin[k_max_nodes + 1];  // prefix of rows_from; [nodes] all rows
  std::int32_t offset_at[k_max_nodes];          // where this rank's rows land at each node
};

/// The first count that fails its check (kind none: every count is sound).
struct LegMessageFault {
  enum Kind : int {
    none = 0,
    sequence,
    rows,
    rows_disagree,
    rank_tokens,
    expert_tokens,
    total_rows,   // ring mode: the rows received so far pass what the outputs hold
    stream_rows,  // ring mode: a stream to this node not between its rows to this rank and T
    ring_rows,    // ring mode: rows to this rank in a channel (or all) outside 0..max_tokens
  };
  int kind = none;
  int node = 0;   // the sender's node
  int index = 0;  // rows: the node; rank_tokens: the local rank; expert_tokens: the expert
  std::int32_t value = 0;
};

/// Checks every node's message (`received`, one slot of `message_ints`
/// each, its own node's included) and this rank's (`sent`): this call's
/// sequence first and last, every row count in 0..max_tokens, a message's
/// rows equal to its rows vector's entry for this node, tokens per local rank
/// within the rows, tokens per expert within rows x max_topk. Sound: fills
/// `out` for nodes 0..place.nodes-1.
EPKIT_HOST_DEVICE inline LegMessageFault read_leg_counts(const std::int32_t* received,
                                                         const std::int32_t* sent,
                                                         const RailPlace& place,
                                                         const MessageFormat& f, int mi,
                                                         std::int32_t sequence, int max_tokens,
                                                         int max_topk, LegCounts& out) {
  using Fault = LegMessageFault;
  out.segment_begin[0] = 0;
  for (int n = 0; n < place.nodes; ++n) {
    const std::int32_t* msg = received + static_cast<std::int64_t>(n) * mi;
    if (msg[0] != sequence || msg[mi - 1] != sequence)
      return Fault{Fault::sequence, n, 0, msg[0] != sequence ? msg[0] : msg[mi - 1]};
    for (int m = 0; m < place.nodes; ++m) {
      const std::int32_t rows = msg[f.rows_vector_at() + m];
      if (rows < 0 || rows > max_tokens) return Fault{Fault::rows, n, m, rows};
    }
    const std::int32_t rows = msg[f.rows_at()];
    if (rows != msg[f.rows_vector_at() + place.node])
      return Fault{Fault::rows_disagree, n, place.node, rows};
    for (int j = 0; j < f.ranks_per_node; ++j) {
      const std::int32_t count = msg[f.ranks_at() + j];
      if (count < 0 || count > rows) return Fault{Fault::rank_tokens, n, j, count};
    }
    for (int e = 0; e < f.experts_per_node; ++e) {
      const std::int32_t count = msg[f.experts_at() + e];
      if (count < 0 ||
          static_cast<std::int64_t>(count) > static_cast<std::int64_t>(rows) * max_topk)
        return Fault{Fault::expert_tokens, n, e, count};
    }
    out.rows_from[n] = rows;
    out.rows_to[n] = sent[static_cast<std::int64_t>(n) * mi + f.rows_at()];
    out.segment_begin[n + 1] = out.segment_begin[n] + rows;
  }
  // Node m's segment for this rank starts after the rows of every node
  // before this one, in node order (the receiver's segment_begin).
  for (int m = 0; m < place.nodes; ++m) {
    int at = 0;
    for (int n = 0; n < place.node; ++n)
      at += received[static_cast<std::int64_t>(n) * mi + f.rows_vector_at() + m];
    out.offset_at[m] = at;
  }
  return Fault{};
}

/// The mailbox's error_value for a fault (error_rank is the sender's global
/// rank): kind, index and value packed, so the host can word it.
EPKIT_HOST_DEVICE inline std::int64_t pack_leg_fault(const LegMessageFault& f) {
  return static_cast<std::int64_t>(f.kind & 0xff) |
         (static_cast<std::int64_t>(f.index & 0xffffff) << 8) |
         (static_cast<std::int64_t>(static_cast<std::uint32_t>(f.value)) << 32);
}
EPKIT_HOST_DEVICE inline LegMessageFault unpack_leg_fault(std::int64_t v) {
  LegMessageFault f;
  f.kind = static_cast<int>(v & 0xff);
  f.index = static_cast<int>((v >> 8) & 0xffffff);
  f.value =
      static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<std::uint64_t>(v) >> 32));
  return f;
}

/// Checks the count messages on the device (one thread: a few dozen ints a
/// node), into `out`; a fault names the sender through the mailbox
/// (k_bad_leg_message) and traps, before any count sizes a copy.
struct LegCountsParams {
  const std::int32_t* received = nullptr;  // [nodes][message_ints]
  const std::int32_t* sent = nullptr;      // [nodes][message_ints]
  RailPlace place;
  MessageFormat format;
  int message_ints = 0;
  std::int32_t sequence = 0;
  int max_tokens = 0;
  int max_topk = 0;
  LegCounts* out = nullptr;
  Mailbox* mailbox = nullptr;
};
cudaError_t launch_leg_counts(const LegCountsParams& p, cudaStream_t stream);

}  // namespace epkit::ep::kernels
