#include "bench/p2p.h"

#ifdef EPKIT_WITH_CUDA

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>

#include "base/cuda_error.h"
#include "bench/kernels/copy.h"
#include "runtime/gpu_rank.h"
#include "runtime/nccl_session.h"

namespace epkit::bench {
namespace {

// Per-GPU resources, released in the destructor.
struct Gpu {
  int device = 0;
  void* src = nullptr;
  void* dst = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  int sms = 0;
  Gpu() = default;
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;
  ~Gpu() {
    cudaSetDevice(device);
    if (src != nullptr) cudaFree(src);
    if (dst != nullptr) cudaFree(dst);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

Result<void> copy_once(CopyMode mode, Gpu& from, Gpu& to, std::size_t bytes) {
  EPKIT_TRY(cuda_ok(cudaSetDevice(from.device), "cudaSetDevice"));
  if (mode == CopyMode::ce_unidir || mode == CopyMode::ce_bidir) {
    return cuda_ok(
        cudaMemcpyPeerAsync(to.dst, to.device, from.src, from.device, bytes, from.stream),
        "cudaMemcpyPeerAsync");
  }
  return cuda_ok(kernels::sm_copy(to.dst, from.src, bytes, from.sms * 2, from.stream),
                 "copy kernel");
}

// Times `iters` copies in each listed direction at once; returns GB/s summed.
Result<double> measure(CopyMode mode, std::vector<std::unique_ptr<Gpu>>& gpus,
                       const std::vector<std::pair<int, int>>& dirs, const P2pOptions& o) {
  for (int w = 0; w < o.warmup; ++w) {
    for (auto [a, b] : dirs) EPKIT_TRY(copy_once(mode, *gpus[a], *gpus[b], o.bytes));
  }
  for (auto [a, b] : dirs) {
    EPKIT_TRY(cuda_ok(cudaSetDevice(a), "cudaSetDevice"));
    EPKIT_TRY(cuda_ok(cudaStreamSynchronize(gpus[a]->stream), "cudaStreamSynchronize"));
  }
  for (auto [a, b] : dirs) {
    EPKIT_TRY(cuda_ok(cudaSetDevice(a), "cudaSetDevice"));
    EPKIT_TRY(cuda_ok(cudaEventRecord(gpus[a]->start, gpus[a]->stream), "cudaEventRecord"));
  }
  for (int i = 0; i < o.iters; ++i) {
    for (auto [a, b] : dirs) EPKIT_TRY(copy_once(mode, *gpus[a], *gpus[b], o.bytes));
  }
  double worst_ms = 0;
  for (auto [a, b] : dirs) {
    EPKIT_TRY(cuda_ok(cudaSetDevice(a), "cudaSetDevice"));
    EPKIT_TRY(cuda_ok(cudaEventRecord(gpus[a]->stop, gpus[a]->stream), "cudaEventRecord"));
  }
  for (auto [a, b] : dirs) {
    EPKIT_TRY(cuda_ok(cudaSetDevice(a), "cudaSetDevice"));
    EPKIT_TRY(cuda_ok(cudaEventSynchronize(gpus[a]->stop), "cudaEventSynchronize"));
    float ms = 0;
    EPKIT_TRY(
        cuda_ok(cudaEventElapsedTime(&ms, gpus[a]->start, gpus[a]->stop), "cudaEventElapsedTime"));
    worst_ms = std::max(worst_ms, static_cast<double>(ms));
  }
  if (worst_ms <= 0) return 0.0;
  return static_cast<double>(o.bytes) * o.iters * static_cast<double>(dirs.size()) /
         (worst_ms * 1e-3) / 1e9;
}

}  // namespace

Result<std::vector<P2pMatrix>> run_p2p(const P2pOptions& o) {
  auto count = runtime::cuda_device_count();
  if (!count) return count.error();
  const int n = *count;
  std::vector<std::unique_ptr<Gpu>> gpus;
  std::vector<std::vector<bool>> peer(static_cast<std::size_t>(n),
                                      std::vector<bool>(static_cast<std::size_t>(n), false));
  for (int i = 0; i < n; ++i) {
    auto g = std::make_unique<Gpu>();
    g->device = i;
    EPKIT_TRY(cuda_ok(cudaSetDevice(i), "cudaSetDevice"));
    EPKIT_TRY(cuda_ok(cudaMalloc(&g->src, o.bytes), fmt::format("cudaMalloc on GPU{}", i)));
    EPKIT_TRY(cuda_ok(cudaMalloc(&g->dst, o.bytes), fmt::format("cudaMalloc on GPU{}", i)));
    EPKIT_TRY(cuda_ok(cudaMemset(g->src, 1, o.bytes), "cudaMemset"));
    EPKIT_TRY(
        cuda_ok(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), "cudaStreamCreate"));
    EPKIT_TRY(cuda_ok(cudaEventCreate(&g->start), "cudaEventCreate"));
    EPKIT_TRY(cuda_ok(cudaEventCreate(&g->stop), "cudaEventCreate"));
    EPKIT_TRY(cuda_ok(cudaDeviceGetAttribute(&g->sms, cudaDevAttrMultiProcessorCount, i),
                      "cudaDeviceGetAttribute"));
    for (int j = 0; j < n; ++j) {
      int can = 0;
      if (i == j) {
        peer[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] = true;
        continue;
      }
      EPKIT_TRY(cuda_ok(cudaDeviceCanAccessPeer(&can, i, j), "cudaDeviceCanAccessPeer"));
      if (can == 0) continue;
      cudaError_t rc = cudaDeviceEnablePeerAccess(j, 0);
      if (rc == cudaErrorPeerAccessAlreadyEnabled)
        cudaGetLastError();
      else
        EPKIT_TRY(cuda_ok(rc, fmt::format("cudaDeviceEnablePeerAccess GPU{} -> GPU{}", i, j)));
      peer[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] = true;
    }
    gpus.push_back(std::move(g));
  }
  std::vector<P2pMatrix> out;
  for (CopyMode mode :
       {CopyMode::ce_unidir, CopyMode::ce_bidir, CopyMode::sm_unidir, CopyMode::sm_bidir}) {
    P2pMatrix m{mode, std::vector<std::vector<double>>(
                          static_cast<std::size_t>(n),
                          std::vector<double>(static_cast<std::size_t>(n), 0.0))};
    const bool sm = mode == CopyMode::sm_unidir || mode == CopyMode::sm_bidir;
    const bool bidir = mode == CopyMode::ce_bidir || mode == CopyMode::sm_bidir;
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        // A kernel can only reach a peer it has access to; both directions
        // at once make sense only between two GPUs.
        if (sm && !(peer[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] &&
                    peer[static_cast<std::size_t>(j)][static_cast<std::size_t>(i)]))
          continue;
        if (bidir && i == j) continue;
        std::vector<std::pair<int, int>> dirs = {{i, j}};
        if (bidir) dirs.push_back({j, i});
        auto gbps = measure(mode, gpus, dirs, o);
        if (!gbps) return gbps.error();
        m.gbps[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] = *gbps;
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace epkit::bench

#endif
