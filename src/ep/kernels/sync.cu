// The engine's small kernels: a rank barrier on the stream, and the copy of
// a combine input that lives outside the heap into the staging region.
#include "ep/kernels/ep_device.cuh"

namespace epkit::ep::kernels {
namespace {

__global__ void barrier_kernel(SyncParams s, std::uint64_t epoch) {
  __threadfence_system();
  rank_barrier_warp(s, epoch, true);
}

// 16-byte vectors when both sides allow it (x rows always do), 4-byte words
// otherwise (top-k weights of an odd width).
template <typename Word>
__global__ void __launch_bounds__(1024) stage_kernel(StageParams p) {
  const int rows = p.rows_from != nullptr ? *p.rows_from : p.rows;
  const int words = p.row_bytes / static_cast<int>(sizeof(Word));
  const std::int64_t total = static_cast<std::int64_t>(rows) * words;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += step) {
    std::int64_t row = i / words;
    std::int64_t word = i % words;
    reinterpret_cast<Word*>(p.dst + row * p.row_bytes)[word] =
        reinterpret_cast<const Word*>(p.src + row * p.src_stride)[word];
  }
}

}  // namespace

cudaError_t launch_barrier(const SyncParams& p, std::uint64_t epoch, cudaStream_t stream) {
  barrier_kernel<<<1, 32, 0, stream>>>(p, epoch);
  return cudaGetLastError();
}

cudaError_t launch_stage(const StageParams& p, cudaStream_t stream) {
  bool vec = p.row_bytes % 16 == 0 && p.src_stride % 16 == 0 &&
             reinterpret_cast<std::uintptr_t>(p.src) % 16 == 0 &&
             reinterpret_cast<std::uintptr_t>(p.dst) % 16 == 0;
  if (vec)
    stage_kernel<int4><<<p.num_blocks, 1024, 0, stream>>>(p);
  else
    stage_kernel<std::uint32_t><<<p.num_blocks, 1024, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
