// low_latency_combine: the expert outputs go back to the ranks whose tokens
// they came from and are summed there with the top-k weights. Send: one warp
// per valid row of the dispatch (its recv_count, src_info, src_slot) copies
// the row into combine_rows[token][k] of its source rank; the last block sets
// the combine flag on every rank. Receive: wait for every rank's flag, then a
// warp reduces one (token, 512 channels) piece: acc = fma(row_k, w_k, acc)
// over the valid k in order, FP32, rounded once to BF16.
#include <cuda_bf16.h>

#include "ep/low_latency/device.cuh"

namespace epkit::ep::kernels {
namespace {

constexpr int k_vectors_per_lane = 2;  // 16-byte vectors a lane sums per piece
constexpr int k_piece = 32 * k_vectors_per_lane;

__device__ __forceinline__ int expert_at(const LowLatencyCombineParams& p, int t, int k) {
  const std::int64_t at = static_cast<std::int64_t>(t) * p.topk_stride + k;
  const std::int64_t e = p.topk_int64 ? static_cast<const std::int64_t*>(p.topk)[at]
                                      : static_cast<const std::int32_t*>(p.topk)[at];
  return e >= 0 && e < p.c.region.num_experts ? static_cast<int>(e) : -1;
}

__device__ __forceinline__ void fma_bf16x8(float (&acc)[8], const int4& v, float w) {
  const unsigned int words[4] = {static_cast<unsigned int>(v.x), static_cast<unsigned int>(v.y),
                                 static_cast<unsigned int>(v.z), static_cast<unsigned int>(v.w)};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    acc[2 * j] = __fmaf_rn(__uint_as_float(words[j] << 16), w, acc[2 * j]);
    acc[2 * j + 1] = __fmaf_rn(__uint_as_float(words[j] & 0xffff0000u), w, acc[2 * j + 1]);
  }
}

__device__ void combine_send(const LowLatencyCombineParams& p, std::uint64_t epoch,
                             std::uint64_t sequence) {
  const LowLatencyCommon& c = p.c;
  const LowLatencyRegion& g = c.region;
  const LowLatencyBufferOffsets& from = g.buffer[p.dispatch_buffer];
  const LowLatencyBufferOffsets& to = g.buffer[c.buffer];
  const int L = g.local_experts;
  __shared__ int first[k_max_experts + 1];  // first flat row of each local expert
  const int* recv_count = low_latency_array<int>(c, c.rank, from.recv_count);
  const int mine = static_cast<int>(threadIdx.x) < L ? load_volatile(recv_count + threadIdx.x) : 0;
  const int excl = block_exclusive_scan(mine);
  if (static_cast<int>(threadIdx.x) < L) first[threadIdx.x] = excl;
  if (static_cast<int>(threadIdx.x) == L - 1) first[L] = excl + mine;
  __syncthreads();
  const int total = first[L];
  const int* src_info = low_latency_array<int>(c, c.rank, from.src_info);
  const int* src_slot = low_latency_array<int>(c, c.rank, from.src_slot);
  const int n16 = g.hidden / 8;
  const int warps = gridDim.x * (blockDim.x >> 5);
  for (int flat = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); flat < total;
       flat += warps) {
    const int lo = low_latency_holder(first, L, flat);  // the expert whose rows hold `flat`
    const int j = flat - first[lo];
    const std::int64_t row = static_cast<std::int64_t>(lo) * g.rows_per_expert + j;
    const int t = load_cg(src_info + row);
    const int slot = load_cg(src_slot + row);
    const int s = slot >> 8;
    const int k = slot & 0xff;
    const std::int64_t x_at = lo * p.x_expert_stride + j * p.x_row_stride;
    const auto* src = reinterpret_cast<const int4*>(p.x + x_at);
    const std::int64_t dst_at =
        to.combine_rows +
        (static_cast<std::int64_t>(t) * k_low_latency_max_topk + k) * g.hidden * 2;
    if (low_latency_mapped(c, s)) {
      warp_copy<8>(low_latency_array<int4>(c, s, dst_at), src, n16,
                   [](const int4* q) { return load_stream(q); });
      continue;
    }
    // Another node's: a put from this region (the zero-copy input, or the
    // row copied into this operation's combine_in, which nothing else reads).
    std::int64_t src_at = p.x_region_offset + x_at;
    if (p.x_region_offset < 0) {
      src_at = to.combine_in + row * g.hidden * 2;
      warp_copy<8>(low_latency_array<int4>(c, c.rank, src_at), src, n16,
                   [](const int4* q) { return load_stream(q); });
      __threadfence_block();
      __syncwarp();
    }
    low_latency_put(
        c, s, dst_at, src_at, 2 * static_cast<std::int64_t>(g.hidden),
        low_latency_signal(k_low_latency_combine_kind, 1, c.buffer, c.rank, c.num_ranks));
  }
  if (!c.net.on) {
    low_latency_send_done(c, epoch, sequence, true);
    return;
  }
  // Each rank on another node gets the count of rows this rank holds for it
  // (from the dispatch's layout) and the running total of rows put to it,
  // in one put after the rows.
  const long long* range = low_latency_array<long long>(c, c.rank, from.layout_range);
  const std::uint64_t tag = (epoch & 0xffffffffull) << 32;
  low_latency_send_done(c, epoch, sequence, true, [&] {
    const int R = c.num_ranks;
    const int warp = threadIdx.x >> 5;
    for (int s = warp; s < R; s += blockDim.x >> 5) {
      if (low_latency_mapped(c, s)) continue;
      if ((threadIdx.x & 31) == 0) {
        std::uint32_t n = 0;
        for (int le = 0; le < L; ++le)
          n += static_cast<std::uint32_t>(
              load_cg(reinterpret_cast<const int*>(range + static_cast<std::int64_t>(le) * R + s)));
        auto* words = low_latency_array<std::uint64_t>(c, c.rank, to.send_meta + s * g.meta_pitch);
        words[0] = tag | n;
        words[1] = low_latency_add_sent_rows(c, k_low_latency_combine_kind, s, n);
        __threadfence_system();
      }
      __syncwarp();
      low_latency_put(c, s, to.combine_count + 16 * static_cast<std::int64_t>(c.rank),
                      to.send_meta + s * g.meta_pitch, 16,
                      low_latency_signal(k_low_latency_combine_kind, 0, c.buffer, c.rank, R));
    }
  });
}

__device__ void combine_receive(const LowLatencyCombineParams& p, std::uint64_t epoch,
                                std::uint64_t sequence) {
  const LowLatencyCommon& c = p.c;
  const LowLatencyRegion& g = c.region;
  const LowLatencyBufferOffsets& off = g.buffer[c.buffer];
  const int lane = threadIdx.x & 31;
  if (c.net.on) {
    // This node's holders set their flag; another node's announce their
    // rows in a count put.
    LowLatencyHeader* mine = low_latency_header(c, c.rank);
    const auto* counts = low_latency_array<const std::uint64_t>(c, c.rank, off.combine_count);
    low_latency_arrivals(
        c, epoch, sequence, k_low_latency_combine_kind, &mine->combine_ready[c.buffer],
        [&](int s) -> std::uint64_t {
          if (low_latency_mapped(c, s)) {
            low_latency_wait_one(c, &mine->combine_flag[c.buffer][s], epoch, s,
                                 k_low_latency_wait_combine);
            return 0;
          }
          // From another node: of this operation, no more rows than this
          // rank's tokens can have selections, and a running total that
          // counts them.
          const std::uint64_t w = load_acquire_sys(counts + 2 * s);
          const std::uint64_t total = load_acquire_sys(counts + 2 * s + 1);
          const auto n = static_cast<std::uint32_t>(w);
          if (static_cast<std::uint32_t>(w >> 32) != static_cast<std::uint32_t>(epoch) ||
              n > static_cast<std::uint32_t>(g.max_tokens * k_low_latency_max_topk) || total < n)
            fail(c.mailbox, k_timeout_low_latency, s, k_low_latency_bad_count);
          return total;
        });
  } else {
    if (threadIdx.x < 32)
      low_latency_wait_flags(c, low_latency_header(c, c.rank)->combine_flag[c.buffer], epoch,
                             k_low_latency_wait_combine, blockIdx.x == 0);
    __syncthreads();
  }
  const int n16 = g.hidden / 8;
  const int pieces = (n16 + k_piece - 1) / k_piece;
  const auto* rows = low_latency_array<const int4>(c, c.rank, off.combine_rows);
  const int warps = gridDim.x * (blockDim.x >> 5);
  for (int item = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); item < p.num_tokens * pieces;
       item += warps) {
    const int t = item / pieces;
    const int piece = item % pieces;
    int my_expert = -1;
    float my_weight = 0.0f;
    if (lane < p.num_topk) {
      my_expert = expert_at(p, t, lane);
      my_weight = p.weights[static_cast<std::int64_t>(t) * p.weights_stride + lane];
    }
    float acc[k_vectors_per_lane][8] = {};
    const int4* token_rows = rows + static_cast<std::int64_t>(t) * k_low_latency_max_topk * n16;
    for (int k = 0; k < p.num_topk; ++k) {
      const int e = __shfl_sync(0xffffffffu, my_expert, k);
      const float w = __shfl_sync(0xffffffffu, my_weight, k);
      if (e < 0) continue;  // the same for every lane
#pragma unroll
      for (int u = 0; u < k_vectors_per_lane; ++u) {
        const int i = piece * k_piece + u * 32 + lane;
        if (i < n16) fma_bf16x8(acc[u], load_cg(token_rows + k * n16 + i), w);
      }
    }
    auto* out = reinterpret_cast<int4*>(p.out + static_cast<std::int64_t>(t) * p.out_stride);
#pragma unroll
    for (int u = 0; u < k_vectors_per_lane; ++u) {
      const int i = piece * k_piece + u * 32 + lane;
      if (i < n16) out[i] = pack_bf16x8(acc[u]);
    }
  }
}

// Named "combine_..." with both phases in one function: DeepEP's
// test_low_latency.py profiles one kernel whose name has "::combine", twice per
// call with a receive hook.
__global__ void __launch_bounds__(k_low_latency_threads, 1)
    combine_low_latency(LowLatencyCombineParams p) {
  const std::uint64_t epoch = low_latency_epoch(p.c);
  const std::uint64_t sequence = low_latency_sequence(p.c, k_low_latency_combine_kind);
  if (p.c.phases & k_low_latency_send) combine_send(p, epoch, sequence);
  if (p.c.phases & k_low_latency_recv) combine_receive(p, epoch, sequence);
}

}  // namespace

cudaError_t launch_low_latency_combine(const LowLatencyCombineParams& p, cudaStream_t stream) {
  combine_low_latency<<<p.num_blocks, k_low_latency_threads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
