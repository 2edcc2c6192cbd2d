// dispatch: every rank writes each of its tokens straight into the rows that
// token takes in its destinations' receive buffers (send_row, from the
// notify kernel or a cached handle). One copy: no ring buffer, no receiver
// copy-out; the receive buffers are the outputs: the Buffer's regions, or
// the caller's tensors when it placed them in the output arena (each rank
// publishes where, in its Meta, before the entry barrier).
//
// A warp moves one token: it loads `Chunk` 16-byte vectors per lane from x
// (local HBM) and stores them to every destination rank of that token, so
// each row is read once however many ranks it goes to.
#include "ep/core/ep_device.cuh"
#include "ep/intranode/kernels.h"

namespace epkit::ep::kernels {
namespace {

template <int Chunk>
__global__ void __launch_bounds__(1024) dispatch_kernel(DispatchParams p) {
  const int lane = threadIdx.x & 31;
  const int warps_per_block = blockDim.x >> 5;
  const int n = p.sync.num_ranks;
  const int me = p.sync.rank;

  const std::uint64_t base = epoch_base(p.sync);
  if (p.entry_barrier) {
    if (p.read_offsets) {
      // Where our results go this call (the Buffer's regions or the
      // caller's tensors in the arena), for the senders to read after the
      // barrier.
      if (blockIdx.x == 0 && threadIdx.x < k_dispatch_fields)
        p.meta[me]->dispatch_offsets[threadIdx.x] = p.own_offsets[threadIdx.x];
      __threadfence_system();
      __syncthreads();
    }
    // The receive buffers may still be read by their owners until they
    // reach this call; block 0 says we are here, every block waits.
    if (threadIdx.x < 32) rank_barrier_warp(p.sync, base + p.entry_epoch, blockIdx.x == 0);
    __syncthreads();
  }

  // Each destination's regions for this call.
  __shared__ std::uint8_t* region[k_dispatch_fields][k_max_ranks];
  for (int i = threadIdx.x; i < n * k_dispatch_fields; i += blockDim.x) {
    const int r = i / k_dispatch_fields;
    const int f = i % k_dispatch_fields;
    std::uint8_t* at = nullptr;
    if (p.read_offsets) {
      const volatile Meta* m = p.meta[r];
      at = p.heap[r] + m->dispatch_offsets[f];
    } else {
      switch (f) {
        case k_field_x:
          at = p.recv_x[r];
          break;
        case k_field_scales:
          at = reinterpret_cast<std::uint8_t*>(p.recv_scales[r]);
          break;
        case k_field_topk:
          at = static_cast<std::uint8_t*>(p.recv_topk[r]);
          break;
        case k_field_weights:
          at = reinterpret_cast<std::uint8_t*>(p.recv_weights[r]);
          break;
        default:
          at = reinterpret_cast<std::uint8_t*>(p.recv_src[r]);
          break;
      }
    }
    region[f][r] = at;
  }
  if (p.prefix_out != nullptr && blockIdx.x == 0)
    for (int i = threadIdx.x; i < n * n; i += blockDim.x) p.prefix_out[i] = p.rank_prefix_matrix[i];
  __syncthreads();
  float* const* recv_scales = reinterpret_cast<float* const*>(region[k_field_scales]);
  void* const* recv_topk = reinterpret_cast<void* const*>(region[k_field_topk]);
  float* const* recv_weights = reinterpret_cast<float* const*>(region[k_field_weights]);
  std::int32_t* const* recv_src = reinterpret_cast<std::int32_t* const*>(region[k_field_src]);

  if (p.num_worst_tokens > 0 && p.num_topk > 0) {
    // Rows past the received ones are ours alone: mark them empty.
    const int received = p.rank_prefix_matrix[(n - 1) * n + me];
    const int pad = (p.num_worst_tokens - received) * p.num_topk;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < pad; i += gridDim.x * blockDim.x) {
      std::int64_t slot = static_cast<std::int64_t>(received) * p.num_topk + i;
      if (p.topk_int64)
        static_cast<std::int64_t*>(recv_topk[me])[slot] = -1;
      else
        static_cast<std::int32_t*>(recv_topk[me])[slot] = -1;
      if (p.weights != nullptr) recv_weights[me][slot] = 0.0f;
    }
  }

  // Rows still landing over the network leg (LegChunks arrival): their
  // segments and this call's number, once per block.
  const LegChunks& arrival = p.arrival;
  const bool gated = arrival.segment_begin != nullptr;
  __shared__ int seg[k_max_nodes + 1];
  __shared__ std::uint64_t number;
  if (gated) {
    for (int i = threadIdx.x; i <= arrival.num_segments; i += blockDim.x)
      seg[i] = arrival.segment_begin[i];
    if (threadIdx.x == 0) number = *arrival.number;
    __syncthreads();
  }
  // Gated, this node's rows (already here) go first, then the others in
  // the order their chunks land.
  const int landed = gated ? min(max(seg[arrival.num_segments], 0), p.num_tokens) : 0;
  const int first = gated && arrival.own >= 0 && landed > 0 ? seg[arrival.own] % landed : 0;

  const int n16 = p.row_bytes >> 4;
  const int total_warps = gridDim.x * warps_per_block;
  for (int i_token = blockIdx.x * warps_per_block + (threadIdx.x >> 5); i_token < p.num_tokens;
       i_token += total_warps) {
    const int t = i_token < landed ? (i_token + first) % landed : i_token;
    const int my_row = lane < n ? p.send_row[static_cast<std::int64_t>(t) * n + lane] : -1;
    // A token that goes nowhere is not read (an internode forwarding
    // dispatch on the leg runs over a bound of rows, most of them empty).
    if (__ballot_sync(0xffffffffu, my_row >= 0) == 0) continue;
    if (gated) leg_wait_arrival(arrival, seg, number, t, p.sync.mailbox);
    int rows[k_max_ranks];
#pragma unroll
    for (int d = 0; d < k_max_ranks; ++d) rows[d] = __shfl_sync(0xffffffffu, my_row, d);

    const int4* src = reinterpret_cast<const int4*>(p.x + t * p.x_stride);
    for (int base = 0; base < n16; base += 32 * Chunk) {
      int4 v[Chunk];
#pragma unroll
      for (int u = 0; u < Chunk; ++u) {
        int i = base + u * 32 + lane;
        if (i < n16) v[u] = gated ? load_l2(src + i) : load_stream(src + i);
      }
#pragma unroll
      for (int d = 0; d < k_max_ranks; ++d) {
        if (rows[d] < 0) continue;
        int4* dst = reinterpret_cast<int4*>(region[k_field_x][d] +
                                            static_cast<std::int64_t>(rows[d]) * p.row_bytes);
#pragma unroll
        for (int u = 0; u < Chunk; ++u) {
          int i = base + u * 32 + lane;
          if (i < n16) store_vec(dst + i, v[u]);
        }
      }
    }

    for (int i = lane; i < p.num_scales; i += 32) {
      const float* at = p.scales + t * p.scale_stride_token + i * p.scale_stride_hidden;
      float s = gated ? __ldcg(at) : *at;
#pragma unroll
      for (int d = 0; d < k_max_ranks; ++d)
        if (rows[d] >= 0) recv_scales[d][static_cast<std::int64_t>(rows[d]) * p.num_scales + i] = s;
    }
    if (lane < p.num_topk) {
      std::int64_t e = p.topk_int64
                           ? static_cast<const std::int64_t*>(p.topk)[t * p.topk_stride + lane]
                           : static_cast<const std::int32_t*>(p.topk)[t * p.topk_stride + lane];
      float w = p.weights != nullptr ? p.weights[t * p.weights_stride + lane] : 0.0f;
#pragma unroll
      for (int d = 0; d < k_max_ranks; ++d) {
        if (rows[d] < 0) continue;
        std::int64_t first = static_cast<std::int64_t>(d) * p.experts_per_rank;
        std::int64_t local = e >= first && e < first + p.experts_per_rank ? e - first : -1;
        std::int64_t slot = static_cast<std::int64_t>(rows[d]) * p.num_topk + lane;
        if (p.topk_int64)
          static_cast<std::int64_t*>(recv_topk[d])[slot] = local;
        else
          static_cast<std::int32_t*>(recv_topk[d])[slot] = static_cast<std::int32_t>(local);
        if (p.weights != nullptr) recv_weights[d][slot] = local >= 0 ? w : 0.0f;
      }
    }
    if (lane == 0) {
#pragma unroll
      for (int d = 0; d < k_max_ranks; ++d)
        if (rows[d] >= 0) recv_src[d][rows[d]] = t;
    }
  }
  grid_exit_barrier(p.sync, base + p.exit_epoch);
}

}  // namespace

cudaError_t launch_dispatch(const DispatchParams& p, cudaStream_t stream) {
  dim3 grid(p.num_blocks), block(p.num_warps * 32);
  switch (p.chunk) {
    case 1:
      dispatch_kernel<1><<<grid, block, 0, stream>>>(p);
      break;
    case 2:
      dispatch_kernel<2><<<grid, block, 0, stream>>>(p);
      break;
    case 4:
      dispatch_kernel<4><<<grid, block, 0, stream>>>(p);
      break;
    case 8:
      dispatch_kernel<8><<<grid, block, 0, stream>>>(p);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
