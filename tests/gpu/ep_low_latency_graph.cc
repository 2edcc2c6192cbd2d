// The low-latency mode under CUDA graphs: each rank (one process per GPU, or
// several sharing one with MPS) captures a dispatch + combine pair in a CUDA
// graph and replays it many times while the inputs change between replays,
// and every replay must equal the eager calls on the same inputs bitwise
// (receive counts, the combined rows; every tenth replay all received rows).
// Two graphs: BF16 without hooks (the combine takes the received rows as
// expert outputs), and FP8 with both receive hooks called inside the capture
// (the combine takes a fixed BF16 tensor).
// Usage: epkit_ep_low_latency_graph RANKS [TOKENS HIDDEN TOPK EXPERTS SMS REPLAYS NODES]
// Where GPUs are fewer than ranks the ranks share them (rank % GPUs). NODES
// above 1 fakes that many nodes of RANKS / NODES ranks, the rows between
// them over the emulated NIC (the device-driven network leg).
#include <epkit/ep.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "ep/testing.h"
#include "ep_harness/store_bootstrap.h"
#include "forked_ranks.h"

using namespace epkit;
using namespace std::chrono_literals;

namespace {

constexpr int k_sets = 4;  // input sets the replays cycle through

struct Shape {
  int tokens = 128, hidden = 7168, topk = 8, experts = 288, sms = 24, replays = 1000, nodes = 1;
};

std::uint16_t to_bf16(float f) {
  std::uint32_t w;
  std::memcpy(&w, &f, 4);
  return static_cast<std::uint16_t>((w + 0x7fffu + ((w >> 16) & 1u)) >> 16);
}

// One input set: x, top-k (distinct experts, a few -1) and weights.
struct HostSet {
  std::vector<std::uint16_t> x;
  std::vector<std::int64_t> idx;
  std::vector<float> w;
};

HostSet make_set(const Shape& s, int rank, int set) {
  std::mt19937_64 rng(1000003ull * static_cast<unsigned>(set) + static_cast<unsigned>(rank));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  HostSet h;
  h.x.resize(static_cast<std::size_t>(s.tokens) * s.hidden);
  for (auto& v : h.x) v = to_bf16(normal(rng) * 0.1f);
  h.idx.resize(static_cast<std::size_t>(s.tokens) * s.topk);
  h.w.resize(h.idx.size());
  std::vector<int> perm(static_cast<std::size_t>(s.experts));
  for (int t = 0; t < s.tokens; ++t) {
    for (int e = 0; e < s.experts; ++e) perm[static_cast<std::size_t>(e)] = e;
    for (int k = 0; k < s.topk; ++k) {
      std::uniform_int_distribution<int> pick(k, s.experts - 1);
      std::swap(perm[static_cast<std::size_t>(k)], perm[static_cast<std::size_t>(pick(rng))]);
      const auto at = static_cast<std::size_t>(t * s.topk + k);
      h.idx[at] = (rng() % 17 == 0) ? -1 : perm[static_cast<std::size_t>(k)];
      h.w[at] = std::fabs(normal(rng));
    }
  }
  return h;
}

// What a replay is compared on.
struct Outcome {
  std::vector<std::uint8_t> count, combined, rows;
};

struct Variant {
  const char* name;
  bool fp8;
  bool hook;
};

int run_variant(int rank, ep::Buffer& buf, const Shape& s, const Variant& v,
                const std::vector<ep::DeviceTensor>& xs, const std::vector<ep::DeviceTensor>& idxs,
                const std::vector<ep::DeviceTensor>& ws, const ep::DeviceTensor& expert_out,
                cudaStream_t stream) {
  // The captured call reads these; a replay's inputs are copied in first.
  auto x = ep::DeviceTensor::zeros(ep::DType::bf16, s.tokens, s.hidden);
  CHECK_OK(x);
  auto idx = ep::DeviceTensor::zeros(ep::DType::int64, s.tokens, s.topk);
  CHECK_OK(idx);
  auto w = ep::DeviceTensor::zeros(ep::DType::fp32, s.tokens, s.topk);
  CHECK_OK(w);
  auto out = ep::DeviceTensor::zeros(ep::DType::bf16, s.tokens, s.hidden);
  CHECK_OK(out);
  ep::LowLatencyDispatchResult last;
  auto pair = [&]() -> Result<void> {
    ep::LowLatencyDispatchArgs d;
    d.x = x->view;
    d.topk_idx = idx->view;
    d.num_max_dispatch_tokens_per_rank = s.tokens;
    d.num_experts = s.experts;
    d.use_fp8 = v.fp8;
    d.return_recv_hook = v.hook;
    d.num_sms = s.sms;
    d.order.stream = stream;
    auto dr = buf.low_latency_dispatch(d);
    if (!dr) return dr.error();
    if (v.hook) EPKIT_TRY(dr->hook());
    ep::LowLatencyCombineArgs c;
    // BF16: the received rows are the expert outputs; FP8: a fixed tensor.
    c.x = v.fp8 ? ep::TensorView::tensor3(expert_out.view.data, ep::DType::bf16,
                                          dr->recv_x.shape[0], dr->recv_x.shape[1], s.hidden)
                : dr->recv_x;
    c.topk_idx = idx->view;
    c.topk_weights = w->view;
    c.handle = dr->handle;
    c.out = out->view;
    c.return_recv_hook = v.hook;
    c.num_sms = s.sms;
    c.order.stream = stream;
    auto cr = buf.low_latency_combine(c);
    if (!cr) return cr.error();
    if (v.hook) EPKIT_TRY(cr->hook());
    last = std::move(*dr);
    return {};
  };
  auto load = [&](int set) -> cudaError_t {
    cudaError_t rc = cudaMemcpyAsync(x->view.data, xs[static_cast<std::size_t>(set)].view.data,
                                     static_cast<std::size_t>(s.tokens) * s.hidden * 2,
                                     cudaMemcpyDeviceToDevice, stream);
    if (rc == cudaSuccess)
      rc = cudaMemcpyAsync(idx->view.data, idxs[static_cast<std::size_t>(set)].view.data,
                           static_cast<std::size_t>(s.tokens) * s.topk * 8,
                           cudaMemcpyDeviceToDevice, stream);
    if (rc == cudaSuccess)
      rc = cudaMemcpyAsync(w->view.data, ws[static_cast<std::size_t>(set)].view.data,
                           static_cast<std::size_t>(s.tokens) * s.topk * 4,
                           cudaMemcpyDeviceToDevice, stream);
    return rc;
  };
  auto outcome = [&](bool rows) -> Result<Outcome> {
    Outcome o;
    auto count = ep::to_host(last.recv_count);
    if (!count) return count.error();
    o.count = std::move(*count);
    auto combined = ep::to_host(out->view);
    if (!combined) return combined.error();
    o.combined = std::move(*combined);
    if (rows) {
      // The valid rows of every local expert.
      const auto* n = reinterpret_cast<const int*>(o.count.data());
      const std::size_t row_bytes =
          static_cast<std::size_t>(s.hidden) * ep::dtype_size(last.recv_x.dtype);
      for (std::int64_t e = 0; e < last.recv_x.shape[0]; ++e) {
        std::vector<std::uint8_t> part(static_cast<std::size_t>(n[e]) * row_bytes);
        cudaError_t rc = cudaMemcpy(part.data(),
                                    static_cast<std::uint8_t*>(last.recv_x.data) +
                                        static_cast<std::size_t>(e * last.recv_x.strides[0]) *
                                            ep::dtype_size(last.recv_x.dtype),
                                    part.size(), cudaMemcpyDeviceToHost);
        if (rc != cudaSuccess) return cuda_error(rc, "reading recv_x");
        o.rows.insert(o.rows.end(), part.begin(), part.end());
      }
    }
    return o;
  };

  // Eager: one pair per input set.
  std::vector<Outcome> eager;
  for (int set = 0; set < k_sets; ++set) {
    CHECK_CUDA(load(set));
    CHECK_OK(pair());
    CHECK_CUDA(cudaStreamSynchronize(stream));
    CHECK_OK(buf.synchronize());
    auto o = outcome(true);
    CHECK_OK(o);
    eager.push_back(std::move(*o));
  }

  // Captured: the same pair, with the inputs copied in outside the graph.
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
    const int set = (i * 3 + 1) % k_sets;  // a different set than the last replay's
    CHECK_CUDA(load(set));
    CHECK_CUDA(cudaGraphLaunch(exec, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    CHECK_OK(buf.synchronize());
    auto o = outcome(i % 10 == 0);
    CHECK_OK(o);
    const Outcome& want = eager[static_cast<std::size_t>(set)];
    bool same = o->count == want.count && o->combined == want.combined &&
                (o->rows.empty() || o->rows == want.rows);
    if (!same && bad++ < 5)
      std::fprintf(stderr, "rank %d: %s: replay %d (input set %d) differs from the eager call%s\n",
                   rank, v.name, i, set,
                   o->count != want.count         ? " (receive counts)"
                   : o->combined != want.combined ? " (combined rows)"
                                                  : " (received rows)");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::printf("rank %d: %s: %d replays, %d differ from the eager calls\n", rank, v.name, s.replays,
              bad);
  return bad == 0 ? 0 : 1;
}

int rank_main(int rank, int ranks, int gpus, std::uint16_t port, const Shape& s) {
  cudaSetDevice(rank % gpus);
  auto session = test::join_forked_store(rank, ranks, port, "low-latency-graph");
  if (!session) {
    std::fprintf(stderr, "store: %s\n", session.error().message.c_str());
    return 2;
  }
  harness::StoreBootstrap boot(session->store, rank, ranks, "ep", 20s);
  ep::BufferOptions bo;
  bo.max_tokens = 0;
  bo.max_hidden = s.hidden;
  bo.max_topk = s.topk;
  bo.timeout_s = 30;
  bo.low_latency_bytes = ep::Buffer::low_latency_size_hint(s.tokens, s.hidden, ranks, s.experts);
  if (s.nodes > 1) {
    bo.max_tokens = 1;
    bo.ranks_per_node = ranks / s.nodes;
    bo.network_leg = ep::BufferOptions::NetworkLeg::emulated_nic;
  }
  auto buffer = ep::Buffer::create(boot, bo);
  CHECK_OK(buffer);
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<ep::DeviceTensor> xs, idxs, ws;
  for (int set = 0; set < k_sets; ++set) {
    const HostSet h = make_set(s, rank, set);
    auto x = ep::DeviceTensor::from_host(ep::DType::bf16, s.tokens, s.hidden, h.x.data());
    CHECK_OK(x);
    auto i = ep::DeviceTensor::from_host(ep::DType::int64, s.tokens, s.topk, h.idx.data());
    CHECK_OK(i);
    auto w = ep::DeviceTensor::from_host(ep::DType::fp32, s.tokens, s.topk, h.w.data());
    CHECK_OK(w);
    xs.push_back(std::move(*x));
    idxs.push_back(std::move(*i));
    ws.push_back(std::move(*w));
  }
  // A fixed expert output for the FP8 graph: BF16 [local experts, ranks * tokens, hidden].
  const std::int64_t rows = static_cast<std::int64_t>(s.experts) * s.tokens;
  std::vector<std::uint16_t> fixed(static_cast<std::size_t>(rows) * s.hidden);
  for (std::size_t i = 0; i < fixed.size(); ++i)
    fixed[i] = to_bf16(static_cast<float>((i * 2654435761u >> 7) % 977) / 977.0f - 0.5f);
  auto expert_out = ep::DeviceTensor::from_host(ep::DType::bf16, rows, s.hidden, fixed.data());
  CHECK_OK(expert_out);
  int worst = 0;
  for (const Variant& v : {Variant{"BF16, no hooks", false, false},
                           Variant{"FP8, receive hooks inside the graph", true, true}}) {
    worst = std::max(worst, run_variant(rank, **buffer, s, v, xs, idxs, ws, *expert_out, stream));
    if (worst > 1) break;
  }
  CHECK_OK((*buffer)->barrier());
  buffer->reset();
  cudaStreamDestroy(stream);
  session->store.close();
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 2;
  Shape s;
  int* fields[] = {&s.tokens, &s.hidden, &s.topk, &s.experts, &s.sms, &s.replays, &s.nodes};
  for (int i = 2; i < argc && i - 2 < 7; ++i) *fields[i - 2] = std::atoi(argv[i]);
  if (s.nodes < 1 || ranks % s.nodes != 0) {
    std::fprintf(stderr, "NODES = %d: must divide the %d ranks\n", s.nodes, ranks);
    return 64;
  }
  const int gpus = test::gpus_or_exit(1);
  if (gpus < ranks)
    std::printf("note: %d ranks share %d GPU(s); start MPS so that their kernels run at once\n",
                ranks, gpus);
  const std::uint16_t port = test::free_local_port();
  const auto codes = test::wait_ranks(
      test::fork_ranks(ranks, [&](int r) { return rank_main(r, ranks, gpus, port, s); }));
  const int worst = *std::max_element(codes.begin(), codes.end());
  std::printf("ep_low_latency_graph: exit %d\n", worst);
  return worst;
}
