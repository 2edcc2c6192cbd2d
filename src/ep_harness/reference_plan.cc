// host_layout (reference_plan.h) and the reference path's bookkeeping
// (reference_plan.h): pure host code.
#include "ep_harness/reference_plan.h"

#include <fmt/format.h>

#include <cstddef>

namespace epkit::harness {
namespace {

std::size_t at(int i, int j, int cols) {
  return static_cast<std::size_t>(i) * static_cast<std::size_t>(cols) + static_cast<std::size_t>(j);
}

}  // namespace

Result<HostLayout> host_layout(const std::vector<std::int64_t>& topk, int num_tokens, int topk_n,
                               int num_experts, int num_ranks) {
  if (num_tokens < 0 || topk_n < 0)
    return make_error(ErrorCode::invalid,
                      fmt::format("host_layout: {} tokens, top-{}: negative", num_tokens, topk_n));
  if (num_ranks < 1 || num_experts < 1 || num_experts % num_ranks != 0)
    return make_error(ErrorCode::invalid,
                      fmt::format("host_layout: {} experts do not split evenly over {} ranks",
                                  num_experts, num_ranks));
  if (topk.size() != static_cast<std::size_t>(num_tokens) * static_cast<std::size_t>(topk_n))
    return make_error(ErrorCode::invalid,
                      fmt::format("host_layout: {} indices for {} tokens of top-{}", topk.size(),
                                  num_tokens, topk_n));
  const int experts_per_rank = num_experts / num_ranks;
  HostLayout out;
  out.num_tokens = num_tokens;
  out.num_ranks = num_ranks;
  out.num_experts = num_experts;
  out.num_tokens_per_rank.assign(static_cast<std::size_t>(num_ranks), 0);
  out.num_tokens_per_expert.assign(static_cast<std::size_t>(num_experts), 0);
  out.is_token_in_rank.assign(at(num_tokens, 0, num_ranks), 0);
  // A token counts once per expert and once per rank however often its
  // top-k lists them.
  std::vector<int> expert_seen(static_cast<std::size_t>(num_experts), -1);
  for (int t = 0; t < num_tokens; ++t) {
    for (int k = 0; k < topk_n; ++k) {
      std::int64_t e = topk[at(t, k, topk_n)];
      if (e == -1) continue;
      if (e < -1 || e >= num_experts)
        return make_error(ErrorCode::invalid,
                          fmt::format("host_layout: token {} slot {} has expert {}, outside "
                                      "[-1, {})",
                                      t, k, e, num_experts));
      auto ei = static_cast<std::size_t>(e);
      if (expert_seen[ei] != t) {
        expert_seen[ei] = t;
        ++out.num_tokens_per_expert[ei];
      }
      out.is_token_in_rank[at(t, static_cast<int>(e) / experts_per_rank, num_ranks)] = 1;
    }
    for (int r = 0; r < num_ranks; ++r)
      out.num_tokens_per_rank[static_cast<std::size_t>(r)] +=
          out.is_token_in_rank[at(t, r, num_ranks)];
  }
  return out;
}

Result<DispatchPlan> plan_dispatch(const HostLayout& mine, const std::vector<int>& counts,
                                   int rank) {
  const int n = mine.num_ranks;
  if (counts.size() != at(n, 0, n))
    return make_error(ErrorCode::invalid,
                      fmt::format("plan_dispatch: {} counts for {} ranks", counts.size(), n));
  std::vector<int> prefix(counts.size(), 0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      int c = counts[at(i, j, n)];
      if (c < 0)
        return make_error(ErrorCode::invalid,
                          fmt::format("plan_dispatch: rank {} sends {} rows to rank {}", i, c, j));
      prefix[at(i, j, n)] = (i > 0 ? prefix[at(i - 1, j, n)] : 0) + c;
    }
  return plan_from_prefix(mine, prefix, rank);
}

Result<DispatchPlan> plan_from_prefix(const HostLayout& mine,
                                      const std::vector<int>& rank_prefix_matrix, int rank) {
  const int n = mine.num_ranks;
  const int tokens = mine.num_tokens;
  if (n < 1 || rank < 0 || rank >= n)
    return make_error(ErrorCode::invalid, fmt::format("plan: rank {} of {}", rank, n));
  if (rank_prefix_matrix.size() != at(n, 0, n) ||
      mine.num_tokens_per_rank.size() != static_cast<std::size_t>(n) ||
      mine.is_token_in_rank.size() != at(tokens, 0, n))
    return make_error(ErrorCode::invalid,
                      fmt::format("plan: a prefix matrix of {} and a layout of {} tokens x {} "
                                  "ranks do not fit",
                                  rank_prefix_matrix.size(), tokens, n));
  DispatchPlan p;
  p.rank = rank;
  p.num_ranks = n;
  p.num_tokens = tokens;
  p.rank_prefix_matrix = rank_prefix_matrix;
  auto prefix = [&](int i, int j) { return i < 0 ? 0 : rank_prefix_matrix[at(i, j, n)]; };
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (prefix(i, j) < prefix(i - 1, j))
        return make_error(ErrorCode::invalid,
                          fmt::format("plan: rank prefix matrix ({}, {}) = {} is below ({}, {}) = "
                                      "{}: not cumulative",
                                      i, j, prefix(i, j), i - 1, j, prefix(i - 1, j)));
  for (int r = 0; r < n; ++r) {
    int sent = prefix(rank, r) - prefix(rank - 1, r);
    if (sent != mine.num_tokens_per_rank[static_cast<std::size_t>(r)])
      return make_error(
          ErrorCode::invalid,
          fmt::format("plan: the prefix matrix says rank {} sends {} rows to rank "
                      "{}, its layout {}",
                      rank, sent, r, mine.num_tokens_per_rank[static_cast<std::size_t>(r)]));
  }
  p.send_count = mine.num_tokens_per_rank;
  p.send_offset.assign(static_cast<std::size_t>(n), 0);
  p.recv_count.assign(static_cast<std::size_t>(n), 0);
  p.recv_offset.assign(static_cast<std::size_t>(n), 0);
  int packed = 0;
  for (int r = 0; r < n; ++r) {
    auto ri = static_cast<std::size_t>(r);
    p.send_offset[ri] = packed;
    packed += p.send_count[ri];
    p.recv_offset[ri] = prefix(r - 1, rank);
    p.recv_count[ri] = prefix(r, rank) - prefix(r - 1, rank);
  }
  p.num_recv_tokens = prefix(n - 1, rank);
  p.send_row.assign(at(tokens, 0, n), -1);
  p.packed_row.assign(at(tokens, 0, n), -1);
  p.packed_token.assign(static_cast<std::size_t>(packed), 0);
  std::vector<int> next(static_cast<std::size_t>(n), 0);  // rows given to rank r so far
  for (int t = 0; t < tokens; ++t)
    for (int r = 0; r < n; ++r) {
      if (mine.is_token_in_rank[at(t, r, n)] == 0) continue;
      auto ri = static_cast<std::size_t>(r);
      int k = next[ri]++;
      p.send_row[at(t, r, n)] = prefix(rank - 1, r) + k;
      p.packed_row[at(t, r, n)] = p.send_offset[ri] + k;
      p.packed_token[static_cast<std::size_t>(p.send_offset[ri] + k)] = t;
    }
  return p;
}

std::int64_t to_local_expert(std::int64_t idx, int rank, int experts_per_rank) {
  std::int64_t begin = static_cast<std::int64_t>(rank) * experts_per_rank;
  return idx >= begin && idx < begin + experts_per_rank ? idx - begin : -1;
}

std::vector<int> count_recv_per_expert(const std::vector<std::int64_t>& recv_topk, int rows,
                                       int topk_n, int local_experts, int alignment) {
  std::vector<int> out(static_cast<std::size_t>(local_experts > 0 ? local_experts : 0), 0);
  std::vector<int> seen(out.size(), -1);
  for (int row = 0; row < rows; ++row)
    for (int k = 0; k < topk_n; ++k) {
      std::int64_t e = recv_topk[at(row, k, topk_n)];
      if (e < 0 || e >= local_experts) continue;
      auto ei = static_cast<std::size_t>(e);
      if (seen[ei] == row) continue;
      seen[ei] = row;
      ++out[ei];
    }
  if (alignment > 1)
    for (int& c : out) c = (c + alignment - 1) / alignment * alignment;
  return out;
}

}  // namespace epkit::harness
