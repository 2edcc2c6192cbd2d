// Host time of the engine's C++ calls: how long layout, dispatch, cached
// dispatch and combine, and the low-latency dispatch and combine (with and
// without the receive hook) take on the calling thread, from the call to its
// return after the kernel launches (tiny inputs, median of many). Events are
// not asked for (StreamOrder::want_event false), as a model layer that
// drops them would call. The Python package's figures
// (tests/python/device/host_cost.py) are compared to these.
// Usage: epkit_ep_call_overhead [RANKS TOKENS ITERS]; ranks share GPUs
// (rank % GPUs) as in scripts/device/python_suite.sh.
#include <epkit/ep.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "ep/testing.h"
#include "ep_harness/store_bootstrap.h"
#include "forked_ranks.h"
#include "runtime/socket.h"
#include "runtime/store.h"

using namespace epkit;
using namespace std::chrono_literals;

namespace {

double median_us(const std::function<bool()>& call, int iters, cudaStream_t stream) {
  std::vector<double> us;
  for (int i = 0; i < iters + iters / 10; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (!call()) return -1;
    auto t1 = std::chrono::steady_clock::now();
    if (i >= iters / 10) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    // Keep the queue short and the ranks in step, outside the timed part.
    if (i % 50 == 49) cudaStreamSynchronize(stream);
  }
  cudaStreamSynchronize(stream);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

int rank_main(int rank, int ranks, int gpus, std::uint16_t port, int tokens, int iters) {
  constexpr int hidden = 7168, topk = 8, experts = 256;
  cudaSetDevice(rank % gpus);
  auto session = test::join_forked_store(rank, ranks, port, "overhead");
  if (!session) return 2;
  harness::StoreBootstrap boot(session->store, rank, ranks, "ep", 20s);
  ep::BufferOptions bo;
  bo.max_tokens = std::max(tokens, 128);
  constexpr int low_latency_max_tokens = 128;
  bo.low_latency_bytes =
      ep::Buffer::low_latency_size_hint(low_latency_max_tokens, hidden, ranks, experts);
  auto made = ep::Buffer::create(boot, bo);
  if (!made) {
    std::fprintf(stderr, "rank %d: %s\n", rank, made.error().message.c_str());
    return 2;
  }
  ep::Buffer& buf = **made;
  std::mt19937_64 rng(7 + rank);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(tokens) * topk);
  for (int t = 0; t < tokens; ++t)
    for (int k = 0; k < topk; ++k) idx[t * topk + k] = (t * 31 + k * 37 + rank) % experts;
  std::vector<std::uint16_t> xs(static_cast<std::size_t>(tokens) * hidden, 0x3f80);
  std::vector<float> ws(static_cast<std::size_t>(tokens) * topk, 0.5f);
  auto x = ep::DeviceTensor::from_host(ep::DType::bf16, tokens, hidden, xs.data());
  auto ti = ep::DeviceTensor::from_host(ep::DType::int64, tokens, topk, idx.data());
  auto tw = ep::DeviceTensor::from_host(ep::DType::fp32, tokens, topk, ws.data());
  if (!x || !ti || !tw) return 2;
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  ep::StreamOrder order{stream, nullptr, false, false};
  auto layout = buf.layout(ti->view, experts, order);
  if (!layout) return 2;
  ep::DispatchArgs da;
  da.x = x->view;
  da.topk_idx = ti->view;
  da.topk_weights = tw->view;
  da.num_tokens_per_rank = layout->num_tokens_per_rank;
  da.is_token_in_rank = layout->is_token_in_rank;
  da.num_tokens_per_expert = layout->num_tokens_per_expert;
  da.order = order;
  auto first = buf.dispatch(da);
  if (!first) return 2;
  auto handle = first->handle;
  ep::DispatchArgs cached;
  cached.x = x->view;
  cached.handle = handle;
  cached.order = order;
  auto recv = ep::DeviceTensor::zeros(ep::DType::bf16, first->recv_x.rows(), hidden);
  if (!recv) return 2;
  ep::CombineArgs ca;
  ca.x = recv->view;
  ca.handle = handle;
  ca.order = order;
  double t_layout =
      median_us([&] { return buf.layout(ti->view, experts, order).ok(); }, iters, stream);
  double t_dispatch = median_us([&] { return buf.dispatch(da).ok(); }, iters, stream);
  double t_cached = median_us([&] { return buf.dispatch(cached).ok(); }, iters, stream);
  double t_combine = median_us([&] { return buf.combine(ca).ok(); }, iters, stream);

  // Low-latency mode: each timed dispatch is followed by a combine (the
  // handle's buffer rotates), and each call is timed on its own.
  ep::LowLatencyDispatchArgs ld;
  ld.x = x->view;
  ld.topk_idx = ti->view;
  ld.num_max_dispatch_tokens_per_rank = low_latency_max_tokens;
  ld.num_experts = experts;
  ld.order = order;
  const std::int64_t local_experts = experts / ranks;
  const std::int64_t low_latency_rows = static_cast<std::int64_t>(ranks) * low_latency_max_tokens;
  auto low_latency_in =
      ep::DeviceTensor::zeros(ep::DType::bf16, local_experts * low_latency_rows, hidden);
  auto low_latency_out = ep::DeviceTensor::zeros(ep::DType::bf16, tokens, hidden);
  if (!low_latency_in || !low_latency_out) return 2;
  ep::LowLatencyCombineArgs lc;
  lc.x = ep::TensorView::tensor3(low_latency_in->view.data, ep::DType::bf16, local_experts,
                                 low_latency_rows, hidden);
  lc.topk_idx = ti->view;
  lc.topk_weights = tw->view;
  lc.out = low_latency_out->view;
  lc.order = order;
  std::vector<double> low_latency_us[4];  // dispatch, combine, dispatch + hook, combine + hook
  bool low_latency_ok = true;
  for (int i = 0; i < iters + iters / 10 && low_latency_ok; ++i) {
    for (int hooked = 0; hooked < 2 && low_latency_ok; ++hooked) {
      ld.return_recv_hook = lc.return_recv_hook = hooked == 1;
      auto t0 = std::chrono::steady_clock::now();
      auto d = buf.low_latency_dispatch(ld);
      if (d && hooked) low_latency_ok = d->hook().ok();
      auto t1 = std::chrono::steady_clock::now();
      if (!d) {
        std::fprintf(stderr, "rank %d: %s\n", rank, d.error().message.c_str());
        low_latency_ok = false;
        break;
      }
      lc.handle = d->handle;
      auto c = buf.low_latency_combine(lc);
      if (c && hooked) low_latency_ok = c->hook().ok();
      auto t2 = std::chrono::steady_clock::now();
      if (!c) {
        std::fprintf(stderr, "rank %d: %s\n", rank, c.error().message.c_str());
        low_latency_ok = false;
        break;
      }
      if (i >= iters / 10) {
        low_latency_us[2 * hooked].push_back(
            std::chrono::duration<double, std::micro>(t1 - t0).count());
        low_latency_us[2 * hooked + 1].push_back(
            std::chrono::duration<double, std::micro>(t2 - t1).count());
      }
    }
    if (i % 50 == 49) cudaStreamSynchronize(stream);
  }
  cudaStreamSynchronize(stream);
  double low_latency_median[4] = {-1, -1, -1, -1};
  for (int k = 0; k < 4 && low_latency_ok; ++k) {
    std::sort(low_latency_us[k].begin(), low_latency_us[k].end());
    low_latency_median[k] = low_latency_us[k][low_latency_us[k].size() / 2];
  }
  if (rank == 0)
    std::printf(
        "cpp ranks=%d tokens=%d layout_us=%.1f dispatch_us=%.1f cached_dispatch_us=%.1f "
        "combine_us=%.1f low_latency_dispatch_us=%.1f low_latency_combine_us=%.1f "
        "low_latency_dispatch_hook_us=%.1f "
        "low_latency_combine_hook_us=%.1f\n",
        ranks, tokens, t_layout, t_dispatch, t_cached, t_combine, low_latency_median[0],
        low_latency_median[1], low_latency_median[2], low_latency_median[3]);
  bool ok = t_layout >= 0 && t_dispatch >= 0 && t_cached >= 0 && t_combine >= 0 && low_latency_ok;
  if (!buf.synchronize()) ok = false;
  session->store.close();
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  int ranks = argc > 1 ? std::atoi(argv[1]) : 2;
  int tokens = argc > 2 ? std::atoi(argv[2]) : 8;
  int iters = argc > 3 ? std::atoi(argv[3]) : 2000;
  const int gpus = test::gpus_or_exit(1);
  const std::uint16_t port = test::free_local_port();
  std::vector<pid_t> kids;
  for (int r = 0; r < ranks; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(rank_main(r, ranks, gpus, port, tokens, iters));
    kids.push_back(pid);
  }
  int worst = 0;
  for (pid_t pid : kids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    worst = std::max(worst, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return worst;
}
