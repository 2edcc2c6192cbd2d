// combine: each rank pulls, for each of its own tokens, the rows its
// destinations hold for it (their combine inputs, inside their heaps, found
// through the offsets they publish before the entry barrier), sums them in
// FP32 (after the optional biases) in rank order and rounds once to BF16. Pulling keeps the
// reduction in registers: no staging write, no second pass.
#include <cuda_bf16.h>

#include <algorithm>

#include "ep/core/ep_device.cuh"
#include "ep/intranode/kernels.h"

namespace epkit::ep::kernels {
namespace {

// Up to 16 vectors per lane in registers need more than the 64 registers a
// 1024-thread block leaves: combine blocks have at most 16 warps.
constexpr int k_combine_max_threads = 512;

template <int Ranks, int Chunk>
__global__ void __launch_bounds__(k_combine_max_threads) combine_kernel(CombineParams p) {
  const int lane = threadIdx.x & 31;
  const int warps_per_block = blockDim.x >> 5;
  const int me = p.sync.rank;

  const std::uint64_t base = epoch_base(p.sync);
  if (p.entry_barrier) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      Meta* mine = p.meta[me];
      mine->combine_x_offset = p.x_offset;
      mine->combine_x_stride = p.x_stride;
      mine->combine_w_offset = p.w_offset;
      mine->combine_w_stride = p.w_stride;
    }
    __threadfence_system();
    __syncthreads();
    // Every rank's input is final once it reached this call.
    if (threadIdx.x < 32) rank_barrier_warp(p.sync, base + 1, blockIdx.x == 0);
  }

  __shared__ const std::uint8_t* src_x[Ranks];
  __shared__ std::int64_t src_x_stride[Ranks];
  __shared__ const float* src_w[Ranks];
  __shared__ std::int64_t src_w_stride[Ranks];
  if (threadIdx.x < Ranks) {
    const int r = threadIdx.x;
    const volatile Meta* m = p.meta[r];
    src_x[r] = p.heap[r] + m->combine_x_offset;
    src_x_stride[r] = m->combine_x_stride;
    std::int64_t w_offset = m->combine_w_offset;
    src_w[r] = w_offset >= 0 ? reinterpret_cast<const float*>(p.heap[r] + w_offset) : nullptr;
    src_w_stride[r] = m->combine_w_stride;
  }
  __syncthreads();

  // Rows whose sums leave over the network leg chunk by chunk (LegChunks
  // departure): their segments, once per block.
  const LegChunks& departure = p.departure;
  const bool counted = departure.segment_begin != nullptr && departure.done != nullptr;
  __shared__ int seg[k_max_nodes + 1];
  if (counted) {
    for (int i = threadIdx.x; i <= departure.num_segments; i += blockDim.x)
      seg[i] = departure.segment_begin[i];
    __syncthreads();
  }

  const int n8 = p.hidden >> 3;
  const int total_warps = gridDim.x * warps_per_block;
  const int num_tokens =
      p.num_tokens_bound != nullptr ? min(p.num_tokens, *p.num_tokens_bound) : p.num_tokens;
  // Counted, the rows that cross the leg go first, segment after segment
  // from the one after this node's, so their chunks fill (and leave) in
  // turn while the rest is summed; this node's own rows go last.
  const int landed = counted ? min(max(seg[departure.num_segments], 0), num_tokens) : 0;
  const int first =
      counted && departure.own >= 0 && landed > 0 ? seg[departure.own + 1] % landed : 0;
  for (int i = blockIdx.x * warps_per_block + (threadIdx.x >> 5); i < num_tokens;
       i += total_warps) {
    const int t = i < landed ? (i + first) % landed : i;
    const int my_row = lane < Ranks ? p.send_row[static_cast<std::int64_t>(t) * Ranks + lane] : -1;
    int rows[Ranks];
    const int4* src[Ranks];
#pragma unroll
    for (int r = 0; r < Ranks; ++r) {
      rows[r] = __shfl_sync(0xffffffffu, my_row, r);
      src[r] = reinterpret_cast<const int4*>(
          src_x[r] + static_cast<std::int64_t>(rows[r] < 0 ? 0 : rows[r]) * src_x_stride[r]);
    }
    int4* out = reinterpret_cast<int4*>(p.out_x + static_cast<std::int64_t>(t) * p.hidden);
    const int4* bias[2];
#pragma unroll
    for (int b = 0; b < 2; ++b)
      bias[b] = p.bias[b] == nullptr
                    ? nullptr
                    : reinterpret_cast<const int4*>(p.bias[b] + static_cast<std::int64_t>(t) *
                                                                    p.bias_stride[b]);
    for (int base = 0; base < n8; base += 32 * Chunk) {
      // Every load first (all ranks, all vectors), then the sums in rank
      // order: the loads overlap, the arithmetic stays deterministic.
      int4 v[Ranks][Chunk];
#pragma unroll
      for (int r = 0; r < Ranks; ++r)
#pragma unroll
        for (int u = 0; u < Chunk; ++u) {
          int i = base + u * 32 + lane;
          if (rows[r] >= 0 && i < n8) v[r][u] = load_peer(src[r] + i);
        }
#pragma unroll
      for (int u = 0; u < Chunk; ++u) {
        int i = base + u * 32 + lane;
        if (i >= n8) continue;
        float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int b = 0; b < 2; ++b)
          if (bias[b] != nullptr) add_bf16x8(acc, bias[b][i]);
#pragma unroll
        for (int r = 0; r < Ranks; ++r)
          if (rows[r] >= 0) add_bf16x8(acc, v[r][u]);
        out[i] = pack_bf16x8(acc);
      }
    }
    if (p.out_weights != nullptr && lane < p.num_topk) {
      float acc = 0.0f;
#pragma unroll
      for (int r = 0; r < Ranks; ++r)
        if (rows[r] >= 0) {
          const volatile float* w =
              src_w[r] + static_cast<std::int64_t>(rows[r]) * src_w_stride[r] + lane;
          acc = acc + *w;
        }
      p.out_weights[static_cast<std::int64_t>(t) * p.num_topk + lane] = acc;
    }
    if (counted) {
      // The row is written: count it in its chunk (the leg's exchange
      // acquires the count, then reads the row).
      __syncwarp();
      if (lane == 0) {
        const int s = leg_segment_of(departure, seg, t);
        if (s != departure.own && t < seg[departure.num_segments]) {
          const int chunk = chunk_of(t - seg[s], seg[s + 1] - seg[s], departure.chunks);
          __threadfence();
          atomicAdd(departure.done + s * departure.chunks + chunk, 1);
        }
      }
    }
  }
  // Nobody may reuse its input (or start the next call) while others read it.
  grid_exit_barrier(p.sync, base + 2);
}

template <int Ranks>
cudaError_t launch_for_ranks(const CombineParams& p, cudaStream_t stream) {
  dim3 grid(p.num_blocks), block(std::min(p.num_warps * 32, k_combine_max_threads));
  // Registers hold Ranks x Chunk vectors per lane: cap the product at 16.
  switch (combine_effective_chunk(p.chunk, Ranks)) {
    case 1:
      combine_kernel<Ranks, 1><<<grid, block, 0, stream>>>(p);
      break;
    case 2:
      combine_kernel<Ranks, 2><<<grid, block, 0, stream>>>(p);
      break;
    case 4:
      if constexpr (Ranks <= 4) combine_kernel<Ranks, 4><<<grid, block, 0, stream>>>(p);
      break;
    case 8:
      if constexpr (Ranks <= 2) combine_kernel<Ranks, 8><<<grid, block, 0, stream>>>(p);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

int combine_effective_chunk(int chunk, int ranks) {
  while (chunk > 1 && chunk * ranks > 16) chunk /= 2;
  return chunk;
}

cudaError_t launch_combine(const CombineParams& p, cudaStream_t stream) {
  switch (p.sync.num_ranks) {
    case 1:
      return launch_for_ranks<1>(p, stream);
    case 2:
      return launch_for_ranks<2>(p, stream);
    case 3:
      return launch_for_ranks<3>(p, stream);
    case 4:
      return launch_for_ranks<4>(p, stream);
    case 5:
      return launch_for_ranks<5>(p, stream);
    case 6:
      return launch_for_ranks<6>(p, stream);
    case 7:
      return launch_for_ranks<7>(p, stream);
    case 8:
      return launch_for_ranks<8>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace epkit::ep::kernels
