// An internode Buffer on the device-driven network leg under CUDA graphs:
// each rank (processes sharing the GPU, nodes faked) captures a cached
// dispatch + combine pair in a graph and replays it many times while x
// changes between replays; every replay's combined rows must equal the
// eager calls' on the same x bitwise. The routing is the first dispatch's
// (a captured dispatch with new routing needs num_worst_tokens without a host
// wait, which the leg does not do yet: docs/ep-internode.md).
// Usage: epkit_ep_leg_graph RANKS NODES [TOKENS HIDDEN REPLAYS]
#include <epkit/ep.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ep/testing.h"
#include "ep_harness/store_bootstrap.h"
#include "forked_ranks.h"

using namespace epkit;
using namespace std::chrono_literals;

namespace {

constexpr int k_sets = 4;

#define CHECK_CUDA(expr)                                                               \
  do {                                                                                 \
    cudaError_t rc_ = (expr);                                                          \
    if (rc_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "rank %d: %s: %s\n", rank, #expr, cudaGetErrorString(rc_)); \
      return 2;                                                                        \
    }                                                                                  \
  } while (0)

struct Shape {
  int tokens = 512, hidden = 2048, topk = 8, experts = 64, replays = 1000;
};

std::uint16_t to_bf16(float f) {
  std::uint32_t w;
  std::memcpy(&w, &f, 4);
  return static_cast<std::uint16_t>((w + 0x7fffu + ((w >> 16) & 1u)) >> 16);
}

int rank_main(int rank, int ranks, int nodes, int gpus, std::uint16_t port, const Shape& s) {
  CHECK_CUDA(cudaSetDevice(rank % gpus));
  auto session = test::join_forked_store(rank, ranks, port, "leg-graph");
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
  auto buffer = ep::Buffer::create(boot, bo);
  CHECK_OK(buffer);
  ep::Buffer& buf = **buffer;

  std::mt19937_64 rng(7 + static_cast<unsigned>(rank));
  std::vector<std::int64_t> idx(static_cast<std::size_t>(s.tokens) * s.topk);
  std::vector<int> perm(static_cast<std::size_t>(s.experts));
  for (int t = 0; t < s.tokens; ++t) {
    for (int e = 0; e < s.experts; ++e) perm[static_cast<std::size_t>(e)] = e;
    for (int k = 0; k < s.topk; ++k) {
      std::uniform_int_distribution<int> pick(k, s.experts - 1);
      std::swap(perm[static_cast<std::size_t>(k)], perm[static_cast<std::size_t>(pick(rng))]);
      idx[static_cast<std::size_t>(t * s.topk + k)] =
          rng() % 13 == 0 ? -1 : perm[static_cast<std::size_t>(k)];
    }
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<ep::DeviceTensor> xs;
  for (int set = 0; set < k_sets; ++set) {
    std::vector<std::uint16_t> h(static_cast<std::size_t>(s.tokens) * s.hidden);
    for (auto& v : h) v = to_bf16(normal(rng) * 0.1f);
    auto t = ep::DeviceTensor::from_host(ep::DType::bf16, s.tokens, s.hidden, h.data());
    CHECK_OK(t);
    xs.push_back(std::move(*t));
  }
  auto x = ep::DeviceTensor::zeros(ep::DType::bf16, s.tokens, s.hidden);
  CHECK_OK(x);
  auto out = ep::DeviceTensor::zeros(ep::DType::bf16, s.tokens, s.hidden);
  CHECK_OK(out);
  auto ti = ep::DeviceTensor::from_host(ep::DType::int64, s.tokens, s.topk, idx.data());
  CHECK_OK(ti);
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ep::StreamOrder order;
  order.stream = stream;
  auto layout = buf.layout(ti->view, s.experts, order);
  CHECK_OK(layout);
  ep::DispatchArgs da;
  da.x = x->view;
  da.topk_idx = ti->view;
  da.num_tokens_per_rank = layout->num_tokens_per_rank;
  da.is_token_in_rank = layout->is_token_in_rank;
  da.num_tokens_per_expert = layout->num_tokens_per_expert;
  da.order.stream = stream;
  auto first = buf.dispatch(da);
  CHECK_OK(first);
  const auto handle = first->handle;

  const std::size_t bytes = static_cast<std::size_t>(s.tokens) * s.hidden * 2;
  auto pair = [&]() -> Result<void> {
    ep::DispatchArgs cached;
    cached.x = x->view;
    cached.handle = handle;
    cached.order.stream = stream;
    auto dr = buf.dispatch(cached);
    if (!dr) return dr.error();
    ep::CombineArgs ca;
    ca.x = dr->recv_x;
    ca.handle = handle;
    ca.order.stream = stream;
    auto cr = buf.combine(ca);
    if (!cr) return cr.error();
    if (cudaError_t rc = cudaMemcpyAsync(out->view.data, cr->combined_x.data, bytes,
                                         cudaMemcpyDeviceToDevice, stream);
        rc != cudaSuccess)
      return cuda_error(rc, "copying the combined rows");
    return {};
  };
  auto load = [&](int set) {
    return cudaMemcpyAsync(x->view.data, xs[static_cast<std::size_t>(set)].view.data, bytes,
                           cudaMemcpyDeviceToDevice, stream);
  };
  std::vector<std::vector<std::uint8_t>> eager;
  for (int set = 0; set < k_sets; ++set) {
    CHECK_CUDA(load(set));
    CHECK_OK(pair());
    CHECK_CUDA(cudaStreamSynchronize(stream));
    auto h = ep::to_host(out->view);
    CHECK_OK(h);
    eager.push_back(std::move(*h));
  }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  auto captured = pair();
  cudaError_t end = cudaStreamEndCapture(stream, &graph);
  CHECK_OK(captured);
  CHECK_CUDA(end);
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  int bad = 0;
  for (int i = 0; i < s.replays; ++i) {
    const int set = (i * 3 + 1) % k_sets;
    CHECK_CUDA(load(set));
    CHECK_CUDA(cudaGraphLaunch(exec, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    auto h = ep::to_host(out->view);
    CHECK_OK(h);
    if (*h != eager[static_cast<std::size_t>(set)] && bad++ < 5)
      std::fprintf(stderr, "rank %d: replay %d (x set %d) differs from the eager calls\n", rank, i,
                   set);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::printf("rank %d: %d replays of a captured cached dispatch + combine, %d differ\n", rank,
              s.replays, bad);
  CHECK_OK(buf.barrier());
  buffer->reset();
  cudaStreamDestroy(stream);
  session->store.close();
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 2;
  const int nodes = argc > 2 ? std::atoi(argv[2]) : 2;
  Shape s;
  int* fields[] = {&s.tokens, &s.hidden, &s.replays};
  for (int i = 3; i < argc && i - 3 < 3; ++i) *fields[i - 3] = std::atoi(argv[i]);
  if (ranks < 2 || nodes < 2 || ranks % nodes != 0 || s.tokens < 1 || s.hidden < 128 ||
      s.hidden % 128 != 0 || s.replays < 1) {
    std::fprintf(stderr, "usage: epkit_ep_leg_graph RANKS NODES [TOKENS HIDDEN REPLAYS]\n");
    return 64;
  }
  const int gpus = test::gpus_or_exit(1);
  const std::uint16_t port = test::free_local_port();
  std::vector<pid_t> kids;
  for (int r = 0; r < ranks; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("NCCL_HOSTID", ("leg-node-" + std::to_string(r / (ranks / nodes))).c_str(), 1);
      std::fflush(stdout);
      ::_exit(rank_main(r, ranks, nodes, gpus, port, s));
    }
    kids.push_back(pid);
  }
  int worst = 0;
  for (pid_t kid : kids) {
    int status = 0;
    ::waitpid(kid, &status, 0);
    worst = std::max(worst, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  std::printf("ep_leg_graph: exit %d\n", worst);
  return worst;
}
