// Host time per call of an internode Buffer on the device-driven network leg
// (BufferOptions::network_leg = emulated_nic): ranks as processes sharing
// the GPU, nodes faked, the emulated NIC capped at GBPS. After one dispatch,
// it times cached dispatches and combines two ways: the host's time for the
// call to return (no synchronisation in between: the leg's transfers run on
// the stream) and the device's time per call (events around a batch). On
// the leg the host time must not depend on the cap; the device time must.
// Usage: epkit_ep_leg_host_time RANKS NODES GBPS [TOKENS HIDDEN CALLS]
// Prints one line per rank: "leg_host_time rank=... host_us dispatch=...".
#include <epkit/ep.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ep/testing.h"
#include "ep_harness/store_bootstrap.h"
#include "forked_ranks.h"

using namespace epkit;
using namespace std::chrono_literals;

namespace {

struct Shape {
  int tokens = 1024, hidden = 7168, topk = 8, experts = 64, calls = 50;
};

int rank_main(int rank, int ranks, int nodes, int gpus, std::uint16_t port, double gbps,
              const Shape& s) {
  if (cudaError_t rc = cudaSetDevice(rank % gpus); rc != cudaSuccess) return 2;
  auto session = test::join_forked_store(rank, ranks, port, "leg-host-time");
  if (!session) {
    std::fprintf(stderr, "rank %d: store: %s\n", rank, session.error().message.c_str());
    return 2;
  }
  harness::StoreBootstrap boot(session->store, rank, ranks, "ep", 30s);
  ep::BufferOptions bo;
  bo.max_tokens = s.tokens;
  bo.max_hidden = s.hidden;
  bo.max_topk = s.topk;
  bo.timeout_s = 30;
  bo.ranks_per_node = ranks / nodes;
  bo.network_leg = ep::BufferOptions::NetworkLeg::emulated_nic;
  bo.emulated_nic_gbps = gbps;
  auto buffer = ep::Buffer::create(boot, bo);
  CHECK_OK(buffer);
  ep::Buffer& buf = **buffer;

  std::mt19937_64 rng(99 + static_cast<unsigned>(rank));
  std::vector<std::int64_t> idx(static_cast<std::size_t>(s.tokens) * s.topk);
  std::vector<int> perm(static_cast<std::size_t>(s.experts));
  for (int t = 0; t < s.tokens; ++t) {
    for (int e = 0; e < s.experts; ++e) perm[static_cast<std::size_t>(e)] = e;
    for (int k = 0; k < s.topk; ++k) {
      std::uniform_int_distribution<int> pick(k, s.experts - 1);
      std::swap(perm[static_cast<std::size_t>(k)], perm[static_cast<std::size_t>(pick(rng))]);
      idx[static_cast<std::size_t>(t * s.topk + k)] = perm[static_cast<std::size_t>(k)];
    }
  }
  auto x = ep::DeviceTensor::zeros(ep::DType::bf16, s.tokens, s.hidden);
  CHECK_OK(x);
  auto ti = ep::DeviceTensor::from_host(ep::DType::int64, s.tokens, s.topk, idx.data());
  CHECK_OK(ti);
  ep::StreamOrder order;
  auto layout = buf.layout(ti->view, s.experts, order);
  CHECK_OK(layout);
  ep::DispatchArgs da;
  da.x = x->view;
  da.topk_idx = ti->view;
  da.num_tokens_per_rank = layout->num_tokens_per_rank;
  da.is_token_in_rank = layout->is_token_in_rank;
  da.num_tokens_per_expert = layout->num_tokens_per_expert;
  auto d = buf.dispatch(da);
  CHECK_OK(d);
  auto expert_out = ep::DeviceTensor::zeros(ep::DType::bf16, d->recv_x.rows(), s.hidden);
  CHECK_OK(expert_out);
  if (cudaError_t rc = cudaDeviceSynchronize(); rc != cudaSuccess) return 3;

  ep::DispatchArgs cached;
  cached.x = x->view;
  cached.handle = d->handle;
  ep::CombineArgs ca;
  ca.x = expert_out->view;
  ca.handle = d->handle;
  // Host: the median time for a call to return; device: a batch of calls
  // between two events, per call.
  auto measure = [&](auto&& call, double& host_us, double& device_us) -> int {
    std::vector<double> host;
    cudaEvent_t a = nullptr, b = nullptr;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, nullptr);
    for (int i = 0; i < s.calls; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      if (!call()) return 1;
      host.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    cudaEventRecord(b, nullptr);
    if (cudaEventSynchronize(b) != cudaSuccess) return 1;
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    std::sort(host.begin(), host.end());
    host_us = host[host.size() / 2];
    device_us = ms * 1000.0 / s.calls;
    return 0;
  };
  double hd = 0, dd = 0, hc = 0, dc = 0;
  if (measure([&] { return buf.dispatch(cached).ok(); }, hd, dd) != 0 ||
      measure([&] { return buf.combine(ca).ok(); }, hc, dc) != 0) {
    std::fprintf(stderr, "rank %d: a timed call failed\n", rank);
    return 1;
  }
  std::printf(
      "leg_host_time rank=%d ranks=%d nodes=%d cap_gbps=%g tokens=%d rows=%lld host_us "
      "dispatch=%.1f combine=%.1f device_us dispatch=%.1f combine=%.1f\n",
      rank, ranks, nodes, gbps, s.tokens, static_cast<long long>(d->recv_x.rows()), hd, hc, dd, dc);
  CHECK_OK(buf.barrier());
  buffer->reset();
  session->store.close();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 2;
  const int nodes = argc > 2 ? std::atoi(argv[2]) : 2;
  const double gbps = argc > 3 ? std::atof(argv[3]) : 50;
  Shape s;
  int* fields[] = {&s.tokens, &s.hidden, &s.calls};
  for (int i = 4; i < argc && i - 4 < 3; ++i) *fields[i - 4] = std::atoi(argv[i]);
  if (ranks < 2 || nodes < 2 || ranks % nodes != 0 || !(gbps > 0) || s.tokens < 1 ||
      s.hidden < 128 || s.hidden % 128 != 0 || s.calls < 1) {
    std::fprintf(stderr, "usage: epkit_ep_leg_host_time RANKS NODES GBPS [TOKENS HIDDEN CALLS]\n");
    return 64;
  }
  const int gpus = test::gpus_or_exit(1);
  const std::uint16_t port = test::free_local_port();
  const auto codes = test::wait_ranks(test::fork_ranks(ranks, [&](int r) {
    // Before anything loads NCCL: each faked node looks like its own host.
    ::setenv("NCCL_HOSTID", ("leg-node-" + std::to_string(r / (ranks / nodes))).c_str(), 1);
    return rank_main(r, ranks, nodes, gpus, port, gbps, s);
  }));
  const int worst = *std::max_element(codes.begin(), codes.end());
  std::printf("ep_leg_host_time: exit %d\n", worst);
  return worst;
}
