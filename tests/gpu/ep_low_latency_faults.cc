// The low-latency mode's faults and late hooks, on ranks forked on this host
// (sharing its GPUs where they are fewer), optionally across faked nodes
// whose rows cross the emulated NIC:
//   own   every rank issues three hooked dispatches (the third reuses the
//         first's buffer) and only then calls the first's hook: DeepEP's rule
//         of two operations in flight is broken, and the hook must refuse
//         with the error that says so, never return the third's rows; the
//         operations after it (on both buffers) still get theirs.
//   peer  rank 0 calls its hooks late while the others go on: one operation
//         late (the others wait for nothing more of rank 0) its rows are
//         still right; then the others run two dispatches ahead (legal for
//         them: they called their hooks) and overwrite the buffer rank 0's
//         pending hook reads, which must stop naming the rank that did.
//   kill  rank KILL sends a hooked dispatch, waits for its send to finish and
//         exits before its hook; every survivor's hook still gives its rows
//         (the dead rank sent them), and its next operation (a combine that
//         waits for the dead rank's rows) fails within the timeout naming it.
// Usage: epkit_ep_low_latency_faults own|peer|kill RANKS NODES [KILL]
// Exit 0 when every rank behaved as above.
#include <epkit/ep.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ep/testing.h"
#include "ep_harness/store_bootstrap.h"
#include "forked_ranks.h"

using namespace epkit;
using namespace std::chrono_literals;

namespace {

constexpr int k_tokens = 64, k_hidden = 1024, k_topk = 4, k_sms = 8;
constexpr int k_killed = 9;
constexpr int k_as_expected = 42;
// A survivor on a GPU shared under MPS whose kernels ended because another
// rank's kernel trapped (MPS reports one client's fault to every client).
constexpr int k_ended_by_a_peers_fault = 43;

bool peers_fault(const std::string& why) {
  return why.find("another rank's failure") != std::string::npos;
}

/// A dispatch's outputs as the routing below makes them: every local expert
/// receives `tokens` BF16 rows of 1.0 (tokens / ranks from each rank).
std::string check_outputs(const ep::LowLatencyDispatchResult& r, int tokens) {
  auto counts = ep::to_host(r.recv_count);
  auto rows = ep::to_host(r.recv_x);
  if (!counts || !rows) return "reading the outputs failed";
  const auto* count = reinterpret_cast<const std::int32_t*>(counts->data());
  const auto* x = reinterpret_cast<const std::uint16_t*>(rows->data());
  const std::int64_t experts = r.recv_x.shape[0], per_expert = r.recv_x.shape[1];
  const std::int64_t hidden = r.recv_x.shape[2];
  for (std::int64_t e = 0; e < experts; ++e) {
    if (count[e] != tokens)
      return "local expert " + std::to_string(e) + " received " + std::to_string(count[e]) +
             " rows, not " + std::to_string(tokens);
    for (std::int64_t i = 0; i < count[e] * hidden; ++i)
      if (x[e * per_expert * hidden + i] != 0x3f80)
        return "local expert " + std::to_string(e) + ": row " + std::to_string(i / hidden) +
               " is not its source's";
  }
  return "";
}

int rank_main(int rank, int ranks, int nodes, int gpus, std::uint16_t port, const std::string& what,
              int victim) {
  cudaSetDevice(rank % gpus);
  auto session = test::join_forked_store(rank, ranks, port, "low-latency-faults");
  if (!session) {
    std::fprintf(stderr, "store: %s\n", session.error().message.c_str());
    return 2;
  }
  harness::StoreBootstrap boot(session->store, rank, ranks, "ep", 20s);
  const int experts = 4 * ranks;
  ep::BufferOptions bo;
  bo.max_tokens = 1;
  bo.max_hidden = k_hidden;
  bo.max_topk = k_topk;
  bo.timeout_s = 3;
  bo.low_latency_bytes = ep::Buffer::low_latency_size_hint(k_tokens, k_hidden, ranks, experts);
  if (nodes > 1) {
    bo.ranks_per_node = ranks / nodes;
    bo.network_leg = ep::BufferOptions::NetworkLeg::emulated_nic;
  }
  auto buffer = ep::Buffer::create(boot, bo);
  CHECK_OK(buffer);
  ep::Buffer& buf = **buffer;

  std::vector<std::uint16_t> x(static_cast<std::size_t>(k_tokens) * k_hidden, 0x3f80);  // 1.0
  std::vector<std::int64_t> idx(static_cast<std::size_t>(k_tokens) * k_topk);
  std::vector<float> w(idx.size(), 0.25f);
  for (int t = 0; t < k_tokens; ++t)
    for (int k = 0; k < k_topk; ++k)  // distinct experts, every rank's
      idx[static_cast<std::size_t>(t * k_topk + k)] = (t + k * (experts / k_topk)) % experts;
  auto dx = ep::DeviceTensor::from_host(ep::DType::bf16, k_tokens, k_hidden, x.data());
  CHECK_OK(dx);
  auto di = ep::DeviceTensor::from_host(ep::DType::int64, k_tokens, k_topk, idx.data());
  CHECK_OK(di);
  auto dw = ep::DeviceTensor::from_host(ep::DType::fp32, k_tokens, k_topk, w.data());
  CHECK_OK(dw);

  ep::LowLatencyDispatchArgs d;
  d.x = dx->view;
  d.topk_idx = di->view;
  d.num_max_dispatch_tokens_per_rank = k_tokens;
  d.num_experts = experts;
  d.use_fp8 = false;
  d.return_recv_hook = true;
  d.num_sms = k_sms;

  std::string got;
  const auto failed = [&](const auto& result) {
    if (result) return false;
    got = result.error().message;
    return true;
  };
  const std::string late_words = "more than one operation late";
  if (what == "own") {
    auto first = buf.low_latency_dispatch(d);
    CHECK_OK(first);
    auto second = buf.low_latency_dispatch(d);
    CHECK_OK(second);
    auto third = buf.low_latency_dispatch(d);
    CHECK_OK(third);
    if (!failed(first->hook())) got = "the hook two operations late was taken";
    std::fprintf(stderr, "rank %d: %s\n", rank, got.c_str());
    if (got.find(late_words) == std::string::npos) return 1;
    // The later operations are untouched: their hooks run, in order.
    CHECK_OK(second->hook());
    CHECK_OK(third->hook());
    CHECK_OK(buf.synchronize());
    std::string bad = check_outputs(*third, k_tokens);
    if (!bad.empty()) {
      std::fprintf(stderr, "rank %d: after the refused hook: %s\n", rank, bad.c_str());
      return 1;
    }
    // The skipped receive owes nothing: the next operation on each buffer
    // waits for its own rows and no others.
    for (int i = 0; i < 2; ++i) {
      auto next = buf.low_latency_dispatch(d);
      CHECK_OK(next);
      CHECK_OK(next->hook());
      CHECK_OK(buf.synchronize());
      bad = check_outputs(*next, k_tokens);
      if (!bad.empty()) {
        std::fprintf(stderr, "rank %d: operation %d after the refused hook: %s\n", rank, 4 + i,
                     bad.c_str());
        return 1;
      }
    }
    return k_as_expected;
  }
  if (what == "peer") {
    auto d1 = buf.low_latency_dispatch(d);
    CHECK_OK(d1);
    auto d2 = buf.low_latency_dispatch(d);
    CHECK_OK(d2);
    if (rank != 0) {
      CHECK_OK(d1->hook());
      CHECK_OK(d2->hook());
      CHECK_OK(buf.synchronize());
    }
    CHECK_OK(boot.all_gather("others received"));
    if (rank == 0) {
      ::usleep(200000);  // later still
      CHECK_OK(d1->hook());
      CHECK_OK(d2->hook());
      CHECK_OK(buf.synchronize());
    }
    for (const auto* r : {&*d1, &*d2}) {
      const std::string bad = check_outputs(*r, k_tokens);
      if (!bad.empty()) {
        std::fprintf(stderr, "rank %d: a hook one operation late: %s\n", rank, bad.c_str());
        return 1;
      }
    }
    CHECK_OK(boot.all_gather("late hooks checked"));
    auto d3 = buf.low_latency_dispatch(d);
    CHECK_OK(d3);
    auto d4 = buf.low_latency_dispatch(d);
    CHECK_OK(d4);
    if (rank != 0) {
      CHECK_OK(d3->hook());
      CHECK_OK(d4->hook());
      auto d5 = buf.low_latency_dispatch(d);  // into rank 0's buffer of d3
      CHECK_OK(d5);
      CHECK_OK(buf.synchronize());
      CHECK_OK(boot.all_gather("ran ahead"));
      return k_as_expected;
    }
    CHECK_OK(boot.all_gather("ran ahead"));
    if (!failed(d3->hook()) && !failed(buf.synchronize()))
      got = "the hook read a buffer another rank had overwritten";
    std::fprintf(stderr, "rank %d: %s\n", rank, got.c_str());
    const bool named =
        got.find("before this rank's receive hook read the one before") != std::string::npos &&
        got.find("rank 0 sent") == std::string::npos;
    if (named) return k_as_expected;
    return peers_fault(got) ? k_ended_by_a_peers_fault : 1;
  }
  auto sent = buf.low_latency_dispatch(d);
  CHECK_OK(sent);
  if (rank == victim) {
    CHECK_OK(buf.synchronize());  // its rows are out
    ::_exit(k_killed);
  }
  if (failed(sent->hook()) || failed(buf.synchronize())) {
    std::fprintf(stderr, "rank %d: its hook failed after rank %d died: %s\n", rank, victim,
                 got.c_str());
    return 1;
  }
  ep::LowLatencyCombineArgs c;
  c.x = ep::TensorView{};
  c.zero_copy = true;  // the expert outputs: whatever the buffer holds
  c.topk_idx = di->view;
  c.topk_weights = dw->view;
  c.handle = sent->handle;
  c.num_sms = k_sms;
  got = "the combine succeeded without the dead rank's rows";
  if (!failed(buf.low_latency_combine(c))) (void)failed(buf.synchronize());
  std::fprintf(stderr, "rank %d: %s\n", rank, got.c_str());
  const std::string who = "rank " + std::to_string(victim);
  // Waiting for its rows (this node's, or on the leg), or its process gone
  // while this rank's kernels ran (a mapping of its memory went with it).
  const bool named = got.find(who + "'s process exited") != std::string::npos ||
                     got.find(who + " did not send") != std::string::npos ||
                     got.find(who + " died: its process exited") != std::string::npos;
  if (named) return k_as_expected;
  return peers_fault(got) ? k_ended_by_a_peers_fault : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  const std::string what = argc > 1 ? argv[1] : "";
  const int ranks = argc > 2 ? std::atoi(argv[2]) : 0;
  const int nodes = argc > 3 ? std::atoi(argv[3]) : 1;
  const int victim = argc > 4 ? std::atoi(argv[4]) : 1;
  if ((what != "own" && what != "peer" && what != "kill") || ranks < 2 || ranks > 64 || nodes < 1 ||
      ranks % nodes != 0 || victim < 0 || victim >= ranks) {
    std::fprintf(stderr, "usage: epkit_ep_low_latency_faults own|peer|kill RANKS NODES [KILL]\n");
    return 64;
  }
  const int gpus = test::gpus_or_exit(1);
  const std::uint16_t port = test::free_local_port();
  const bool kill = what == "kill";
  const auto codes = test::wait_ranks(test::fork_ranks(
      ranks, [&](int r) { return rank_main(r, ranks, nodes, gpus, port, what, victim); }));
  // Every rank as expected (the victim killed); where ranks share a GPU a
  // rank may instead see a peer's trap end its kernels, as long as one rank
  // said what happened.
  int worst = 0, said = 0;
  for (int r = 0; r < ranks; ++r) {
    const int code = codes[static_cast<std::size_t>(r)];
    said += code == k_as_expected;
    const bool ok = kill && r == victim ? code == k_killed
                                        : code == k_as_expected ||
                                              (gpus < ranks && code == k_ended_by_a_peers_fault);
    if (!ok) {
      std::printf("rank %d: exit %d\n", r, code);
      worst = 1;
    }
  }
  if (said == 0) worst = 1;
  std::printf("ep_low_latency_faults %s: exit %d\n", what.c_str(), worst);
  return worst;
}
