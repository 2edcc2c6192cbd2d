// An internode Buffer on the device-driven network leg under CUDA graphs:
// each rank (processes sharing the GPU, nodes faked) captures a step and
// replays it many times while its inputs change between replays; every
// replay's combined rows must equal the eager calls' on the same inputs
// bitwise. Two steps:
// - cached: a cached dispatch + combine on the first dispatch's routing, x
//   changing;
// - routing: layout + dispatch with num_worst_tokens + combine, the top-k
//   routing and x changing (the sizes never reach the host on the leg).
// Usage: epkit_ep_leg_graph RANKS NODES [TOKENS HIDDEN REPLAYS [cached|routing]]
#include <epkit/ep.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ep/testing.h"
#include "ep_harness/conformance_checks.h"
#include "ep_harness/store_bootstrap.h"
#include "forked_ranks.h"

using namespace epkit;
using namespace std::chrono_literals;

namespace {

constexpr int k_sets = 4;

struct Shape {
  int tokens = 512, hidden = 2048, topk = 8, experts = 64, replays = 1000;
  bool routing = false;
};

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
  // The leg's own stream forks and joins inside the capture too.
  bo.overlap_network_leg = true;
  // EP_LEG_RINGS=1: ring mode (BufferOptions::internode_rings).
  if (const char* rings = std::getenv("EP_LEG_RINGS"); rings != nullptr && rings[0] == '1')
    bo.internode_rings = true;
  auto buffer = ep::Buffer::create(boot, bo);
  CHECK_OK(buffer);
  ep::Buffer& buf = **buffer;

  std::mt19937_64 rng(7 + static_cast<unsigned>(rank));
  // k_sets routings (the cached step uses the first): distinct experts per
  // token, some slots -1.
  std::vector<ep::DeviceTensor> routings;
  for (int set = 0; set < k_sets; ++set) {
    const auto idx = test::random_topk(rng, s.tokens, s.topk, s.experts, 13);
    auto t = ep::DeviceTensor::from_host(ep::DType::int64, s.tokens, s.topk, idx.data());
    CHECK_OK(t);
    routings.push_back(std::move(*t));
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<ep::DeviceTensor> xs;
  for (int set = 0; set < k_sets; ++set) {
    std::vector<std::uint16_t> h(static_cast<std::size_t>(s.tokens) * s.hidden);
    for (auto& v : h) v = harness::conformance::float_to_bf16(normal(rng) * 0.1f);
    auto t = ep::DeviceTensor::from_host(ep::DType::bf16, s.tokens, s.hidden, h.data());
    CHECK_OK(t);
    xs.push_back(std::move(*t));
  }
  auto x = ep::DeviceTensor::zeros(ep::DType::bf16, s.tokens, s.hidden);
  CHECK_OK(x);
  auto out = ep::DeviceTensor::zeros(ep::DType::bf16, s.tokens, s.hidden);
  CHECK_OK(out);
  auto ti = ep::DeviceTensor::zeros(ep::DType::int64, s.tokens, s.topk);
  CHECK_OK(ti);
  const std::size_t bytes = static_cast<std::size_t>(s.tokens) * s.hidden * 2;
  const std::size_t idx_bytes = static_cast<std::size_t>(s.tokens) * s.topk * 8;
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ep::StreamOrder order;
  order.stream = stream;
  CHECK_CUDA(cudaMemcpyAsync(ti->view.data, routings[0].view.data, idx_bytes,
                             cudaMemcpyDeviceToDevice, stream));
  // A dispatch of x on the routing in ti, as its layout says.
  auto routed = [&](const ep::Layout& lay) {
    ep::DispatchArgs d;
    d.x = x->view;
    d.topk_idx = ti->view;
    d.num_tokens_per_rank = lay.num_tokens_per_rank;
    d.is_token_in_rank = lay.is_token_in_rank;
    d.num_tokens_per_expert = lay.num_tokens_per_expert;
    d.order.stream = stream;
    return d;
  };
  auto layout = buf.layout(ti->view, s.experts, order);
  CHECK_OK(layout);
  auto first = buf.dispatch(routed(*layout));
  CHECK_OK(first);
  const auto handle = first->handle;

  // Combine what came, as a model layer hands back its expert outputs.
  auto combine_into_out = [&](const ep::DispatchResult& dr) -> Result<void> {
    ep::CombineArgs ca;
    ca.x = dr.recv_x;
    ca.handle = dr.handle;
    ca.order.stream = stream;
    auto cr = buf.combine(ca);
    if (!cr) return cr.error();
    if (cudaError_t rc = cudaMemcpyAsync(out->view.data, cr->combined_x.data, bytes,
                                         cudaMemcpyDeviceToDevice, stream);
        rc != cudaSuccess)
      return cuda_error(rc, "copying the combined rows");
    return {};
  };
  auto cached_step = [&]() -> Result<void> {
    ep::DispatchArgs cached;
    cached.x = x->view;
    cached.handle = handle;
    cached.order.stream = stream;
    auto dr = buf.dispatch(cached);
    if (!dr) return dr.error();
    return combine_into_out(*dr);
  };
  // Every rank may receive every token of every rank.
  const int worst = s.tokens * ranks;
  auto routing_step = [&]() -> Result<void> {
    auto lay = buf.layout(ti->view, s.experts, order);
    if (!lay) return lay.error();
    ep::DispatchArgs d = routed(*lay);
    d.num_worst_tokens = worst;
    auto dr = buf.dispatch(d);
    if (!dr) return dr.error();
    return combine_into_out(*dr);
  };
  auto pair = [&]() { return s.routing ? routing_step() : cached_step(); };
  auto load = [&](int set) {
    cudaError_t rc = cudaMemcpyAsync(x->view.data, xs[static_cast<std::size_t>(set)].view.data,
                                     bytes, cudaMemcpyDeviceToDevice, stream);
    if (rc == cudaSuccess && s.routing)
      rc = cudaMemcpyAsync(ti->view.data, routings[static_cast<std::size_t>(set)].view.data,
                           idx_bytes, cudaMemcpyDeviceToDevice, stream);
    return rc;
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
  // The eager results themselves must carry the rows (a step that moved
  // nothing would replay "equal" too).
  for (const auto& e : eager)
    if (std::all_of(e.begin(), e.end(), [](std::uint8_t b) { return b == 0; })) {
      std::fprintf(stderr, "rank %d: an eager step combined nothing\n", rank);
      return 1;
    }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  auto captured = pair();
  cudaError_t end = cudaStreamEndCapture(stream, &graph);
  CHECK_OK(captured);
  CHECK_CUDA(end);
  // As PyTorch instantiates its graphs: a dispatch's handle memory, allocated
  // inside the capture, is freed by the next launch.
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch));
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
  std::printf("rank %d: %d replays of a captured %s, %d differ\n", rank, s.replays,
              s.routing ? "layout + dispatch (num_worst_tokens, routing changing) + combine"
                        : "cached dispatch + combine",
              bad);
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
  const std::string mode = argc > 6 ? argv[6] : "cached";
  s.routing = mode == "routing";
  if (ranks < 2 || nodes < 2 || ranks % nodes != 0 || s.tokens < 1 || s.tokens > 65536 ||
      s.hidden < 128 || s.hidden > 65536 || s.hidden % 128 != 0 || s.replays < 1 ||
      (mode != "cached" && mode != "routing")) {
    std::fprintf(
        stderr, "usage: epkit_ep_leg_graph RANKS NODES [TOKENS HIDDEN REPLAYS [cached|routing]]\n");
    return 64;
  }
  const int gpus = test::gpus_or_exit(1);
  const std::uint16_t port = test::free_local_port();
  const auto kids = test::fork_ranks(ranks, [&](int r) {
    ::setenv("NCCL_HOSTID", ("leg-node-" + std::to_string(r / (ranks / nodes))).c_str(), 1);
    return rank_main(r, ranks, nodes, gpus, port, s);
  });
  int worst = 0;
  for (const int code : test::wait_ranks(kids)) worst = std::max(worst, code);
  std::printf("ep_leg_graph: %s, exit %d\n", mode.c_str(), worst);
  return worst;
}
