// What the standalone GPU programs (epkit_ep_smoke, epkit_ep_low_latency_graph,
// epkit_ep_call_overhead) share: they fork one process per rank, so CUDA must
// not start in the parent (support/gpu_gate.h counts the GPUs in a child, and
// decides between running, SKIP and FAIL).
#pragma once

#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "runtime/socket.h"
#include "runtime/store.h"
#include "support/gpu_gate.h"

/// In a rank's main (an `int rank` in scope): a failed Result ends the rank
/// with exit 2 after naming the rank, the call and the cause.
#define CHECK_OK(expr)                                                                    \
  do {                                                                                    \
    auto&& r_ = (expr);                                                                   \
    if (!r_) {                                                                            \
      std::fprintf(stderr, "rank %d: %s: %s\n", rank, #expr, r_.error().message.c_str()); \
      return 2;                                                                           \
    }                                                                                     \
  } while (0)

/// In a rank's main: a failed CUDA call ends the rank with exit 2 after
/// naming the rank, the call and CUDA's words for it.
#define CHECK_CUDA(expr)                                                               \
  do {                                                                                 \
    cudaError_t rc_ = (expr);                                                          \
    if (rc_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "rank %d: %s: %s\n", rank, #expr, cudaGetErrorString(rc_)); \
      return 2;                                                                        \
    }                                                                                  \
  } while (0)

namespace epkit::test {

/// A free TCP port on 127.0.0.1 for the ranks' store (0 if none).
inline std::uint16_t free_local_port() {
  auto probe = runtime::listen_tcp("127.0.0.1", 0);
  return probe ? runtime::local_port(probe->get()).value_or(0) : std::uint16_t{0};
}

/// Rank `rank` of `ranks` forked on this host joins the store on `port`
/// (rank 0 serves it), within 20 s.
inline auto join_forked_store(int rank, int ranks, std::uint16_t port, const char* tag) {
  runtime::LaunchInfo info;
  info.rank = rank;
  info.world_size = ranks;
  info.local_rank = rank;
  info.local_world_size = ranks;
  info.master_port = port;
  info.master_addr = "127.0.0.1";
  // One host, loopback only: no secret (the store binds 127.0.0.1).
  return runtime::open_store(info, "localhost", tag, "", info.master_addr,
                             runtime::Deadline::after_seconds(20));
}

/// Forks one process per rank, each running `rank_main(rank)` and exiting
/// with what it returns (stdout flushed first, so no buffered line is
/// printed twice). The parent must not have started CUDA.
template <class RankMain>
std::vector<pid_t> fork_ranks(int ranks, RankMain&& rank_main) {
  std::vector<pid_t> kids;
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::fflush(stdout);
      ::_exit(rank_main(r));
    }
    kids.push_back(pid);
  }
  return kids;
}

/// Waits for every rank forked by fork_ranks: each one's exit code, or 128 +
/// the signal that ended it.
inline std::vector<int> wait_ranks(const std::vector<pid_t>& kids) {
  std::vector<int> codes;
  for (const pid_t kid : kids) {
    int status = 0;
    ::waitpid(kid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

/// Top-k routing for `tokens` tokens: `topk` distinct experts of `experts`
/// each (a partial Fisher-Yates shuffle), a slot -1 about one time in
/// `unrouted_one_in` (0: never). Row-major [tokens, topk].
inline std::vector<std::int64_t> random_topk(std::mt19937_64& rng, int tokens, int topk,
                                             int experts, int unrouted_one_in = 0) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(tokens) * static_cast<std::size_t>(topk));
  std::vector<int> perm(static_cast<std::size_t>(experts));
  for (int t = 0; t < tokens; ++t) {
    for (int e = 0; e < experts; ++e) perm[static_cast<std::size_t>(e)] = e;
    for (int k = 0; k < topk; ++k) {
      std::uniform_int_distribution<int> pick(k, experts - 1);
      std::swap(perm[static_cast<std::size_t>(k)], perm[static_cast<std::size_t>(pick(rng))]);
      const bool unrouted =
          unrouted_one_in > 0 && rng() % static_cast<unsigned>(unrouted_one_in) == 0;
      idx[static_cast<std::size_t>(t) * static_cast<std::size_t>(topk) +
          static_cast<std::size_t>(k)] = unrouted ? -1 : perm[static_cast<std::size_t>(k)];
    }
  }
  return idx;
}

}  // namespace epkit::test
