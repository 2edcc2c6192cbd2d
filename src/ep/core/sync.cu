// The engine's small kernels: a rank barrier on the stream (the notify step:
// every rank tells its node peers it reached the operation), and the copy
// of a combine input that lives outside the heap into the staging region.
#include "ep/core/ep_device.cuh"

namespace epkit::ep::kernels {
namespace {

__global__ void notify_peers_kernel(PeerNotifyParams p) {
  const std::uint64_t epoch = epoch_base(p.sync) + 1;
  if (p.publish != nullptr && threadIdx.x == 0) {
    p.publish->combine_x_offset = p.x_offset;
    p.publish->combine_x_stride = p.x_stride;
    p.publish->combine_w_offset = p.w_offset;
    p.publish->combine_w_stride = p.w_stride;
  }
  __threadfence_system();
  __syncwarp();
  rank_barrier_warp(p.sync, epoch, true);
  if (threadIdx.x == 0) *p.sync.epoch = epoch;
}

// 16-byte vectors when both sides allow it (x rows always do), 4-byte words
// otherwise (top-k weights of an odd width). Each thread keeps `Unroll`
// loads in flight: with a few SMs the copy is latency-bound otherwise.
template <typename Word, int Unroll>
__global__ void __launch_bounds__(1024) stage_kernel(StageParams p) {
  const int rows = p.rows_from != nullptr ? *p.rows_from : p.rows;
  std::uint8_t* const dst =
      p.dst + (p.dst_row != nullptr ? static_cast<std::int64_t>(*p.dst_row) * p.row_bytes : 0);
  const int words = p.row_bytes / static_cast<int>(sizeof(Word));
  const std::int64_t total = static_cast<std::int64_t>(rows) * words;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       first < total; first += step * Unroll) {
    Word v[Unroll];
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      std::int64_t i = first + u * step;
      if (i < total)
        v[u] = reinterpret_cast<const Word*>(p.src + (i / words) * p.src_stride)[i % words];
    }
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      std::int64_t i = first + u * step;
      if (i < total) reinterpret_cast<Word*>(dst + (i / words) * p.row_bytes)[i % words] = v[u];
    }
  }
}

}  // namespace

cudaError_t launch_notify_peers(const PeerNotifyParams& p, cudaStream_t stream) {
  notify_peers_kernel<<<1, 32, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_stage(const StageParams& p, cudaStream_t stream) {
  bool vec = p.row_bytes % 16 == 0 && p.src_stride % 16 == 0 &&
             reinterpret_cast<std::uintptr_t>(p.src) % 16 == 0 &&
             reinterpret_cast<std::uintptr_t>(p.dst) % 16 == 0;
  if (vec)
    stage_kernel<int4, 4><<<p.num_blocks, 1024, 0, stream>>>(p);
  else
    stage_kernel<std::uint32_t, 4><<<p.num_blocks, 1024, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
