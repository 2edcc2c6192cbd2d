// The engine's small kernels: a rank barrier on the stream, and the copy of
// a combine input that lives outside the heap into the staging region.
#include "ep/kernels/ep_device.cuh"

namespace epkit::ep::kernels {
namespace {

__global__ void barrier_kernel(SyncParams s, std::uint64_t epoch) {
  __threadfence_system();
  rank_barrier_warp(s, epoch, true);
}

__global__ void __launch_bounds__(512) stage_kernel(StageParams p) {
  const int rows = p.rows_from != nullptr ? *p.rows_from : p.rows;
  const int words = p.row_bytes >> 2;
  const std::int64_t total = static_cast<std::int64_t>(rows) * words;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t row = i / words;
    std::int64_t word = i % words;
    reinterpret_cast<std::uint32_t*>(p.dst + row * p.row_bytes)[word] =
        reinterpret_cast<const std::uint32_t*>(p.src + row * p.src_stride)[word];
  }
}

}  // namespace

cudaError_t launch_barrier(const SyncParams& p, std::uint64_t epoch, cudaStream_t stream) {
  barrier_kernel<<<1, 32, 0, stream>>>(p, epoch);
  return cudaGetLastError();
}

cudaError_t launch_stage(const StageParams& p, cudaStream_t stream) {
  stage_kernel<<<p.num_blocks, 512, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
