// The all-to-all ceiling for SM stores over NVLink: every rank writes a
// contiguous block into every other rank's memory at once, with as many
// blocks as asked. What the engine's dispatch (scattered rows) is measured
// against in docs/performance.md.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ep_ceiling.h"

namespace {

__global__ void __launch_bounds__(1024) all_to_all_write(CeilingArgs a) {
  const std::int64_t n16 = a.bytes_per_peer / 16;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const int4* src = reinterpret_cast<const int4*>(a.src);
  for (int k = 1; k < a.ranks; ++k) {
    // Peers in a rotating order so that the ranks do not all hit one peer first.
    const int peer = (a.rank + k) % a.ranks;
    int4* dst = reinterpret_cast<int4*>(a.peers[peer] + a.rank * a.bytes_per_peer);
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n16;
         i += 4 * step) {
      int4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (i + u * step < n16) v[u] = src[i + u * step];
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (i + u * step < n16) dst[i + u * step] = v[u];
    }
  }
}

}  // namespace

cudaError_t launch_all_to_all_write(const CeilingArgs& args, int blocks, cudaStream_t stream) {
  all_to_all_write<<<blocks, 1024, 0, stream>>>(args);
  return cudaGetLastError();
}
