// The host bookkeeping of the reference path (reference.h), apart from NCCL
// and the GPU so that the CPU tests can check it: who sends which row where,
// and in which order the rows come back for combine.
#pragma once

#include <epkit/result.h>

#include <cstdint>
#include <vector>

namespace epkit::harness {

/// The routing computed on the host from a host copy of topk_idx.
struct HostLayout {
  int num_tokens = 0;
  int num_ranks = 0;
  int num_experts = 0;
  std::vector<int> num_tokens_per_rank;        // [ranks]
  std::vector<int> num_tokens_per_expert;      // [experts]
  std::vector<std::uint8_t> is_token_in_rank;  // [tokens * ranks], 0 or 1
};

/// topk: tokens * topk indices (-1 = none), experts split evenly over ranks.
Result<HostLayout> host_layout(const std::vector<std::int64_t>& topk, int num_tokens, int topk_n,
                               int num_experts, int num_ranks);

/// One rank's side of a dispatch (and, reversed, of its combine).
///
/// The packed send buffer holds the rows for rank 0, then those for rank 1,
/// ..., each destination's rows in token order. The receive buffer holds the
/// rows from rank 0, then from rank 1, ..., each source's rows in its token
/// order. Combine sends every received row back to its source, which then
/// finds it at the same place as in its own packed send buffer.
struct DispatchPlan {
  int rank = 0;
  int num_ranks = 0;
  int num_tokens = 0;
  /// [ranks * ranks]: element (i, j) = rows rank j receives from ranks 0..i.
  std::vector<int> rank_prefix_matrix;
  /// [tokens * ranks]: the row of token t in rank r's receive buffer, or -1.
  std::vector<int> send_row;
  /// [tokens * ranks]: the row of (t, r) in this rank's packed send buffer
  /// (and in the combine receive buffer), or -1.
  std::vector<int> packed_row;
  /// [packed rows]: the token each packed row copies.
  std::vector<int> packed_token;
  std::vector<int> send_count;   // [ranks]: rows to rank r
  std::vector<int> send_offset;  // [ranks]: first packed row for rank r
  std::vector<int> recv_count;   // [ranks]: rows from rank s
  std::vector<int> recv_offset;  // [ranks]: first received row from rank s
  int num_recv_tokens = 0;
};

/// counts: [ranks * ranks], row s = rank s's num_tokens_per_rank (what the
/// all-gather returns). This rank's row must equal `mine`'s counts.
Result<DispatchPlan> plan_dispatch(const HostLayout& mine, const std::vector<int>& counts,
                                   int rank);

/// The same plan from a rank prefix matrix already made (combine rebuilds its
/// plan from the dispatch's). Checks the matrix is cumulative and agrees
/// with `mine`.
Result<DispatchPlan> plan_from_prefix(const HostLayout& mine,
                                      const std::vector<int>& rank_prefix_matrix, int rank);

/// A global expert id as rank `rank`'s local id: idx - rank * experts_per_rank
/// when it falls in that rank's range, else -1 (-1 stays -1).
std::int64_t to_local_expert(std::int64_t idx, int rank, int experts_per_rank);

/// Per local expert, the received rows whose (local) index list holds it,
/// each rounded up to a multiple of `alignment`. A row listing an expert
/// twice counts once.
std::vector<int> count_recv_per_expert(const std::vector<std::int64_t>& recv_topk, int rows,
                                       int topk_n, int local_experts, int alignment);

}  // namespace epkit::harness
