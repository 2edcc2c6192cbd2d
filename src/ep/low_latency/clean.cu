// clean_low_latency_buffer: a rank barrier, this rank's header zeroed (flags,
// epochs, the grid counter) with the sliced dispatch's and the combine's
// count words, another barrier, so that every rank starts the next
// low-latency operation from epoch 1 and no peer writes a flag before the
// owner cleared it. One warp. Across nodes the internode Buffer puts its own
// barriers around this (the ones here span the node).
#include "ep/core/ep_device.cuh"
#include "ep/low_latency/kernels.h"

namespace epkit::ep::kernels {
namespace {

__global__ void low_latency_clean(LowLatencyCleanParams p) {
  const std::uint64_t base = epoch_base(p.sync);
  __threadfence_system();
  rank_barrier_warp(p.sync, base + 1, true);
  auto* words = reinterpret_cast<std::uint64_t*>(p.header);
  for (std::size_t i = threadIdx.x; i < sizeof(LowLatencyHeader) / 8; i += 32) words[i] = 0;
  // A sliced dispatch's and a combine's count words carry the epoch: one
  // left from before would look like a later operation's.
  for (int b = 0; b < 2; ++b) {
    for (std::int64_t i = threadIdx.x; i < p.slice_meta_words; i += 32) p.slice_meta[b][i] = 0;
    for (int i = threadIdx.x; i < p.combine_count_words; i += 32) p.combine_count[b][i] = 0;
  }
  __threadfence_system();
  __syncwarp();
  rank_barrier_warp(p.sync, base + 2, true);
  if (threadIdx.x == 0) *p.sync.epoch = base + 2;
}

}  // namespace

cudaError_t launch_low_latency_clean(const LowLatencyCleanParams& p, cudaStream_t stream) {
  low_latency_clean<<<1, 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
