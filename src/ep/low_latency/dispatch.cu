// low_latency_dispatch: every (token, k) with an expert becomes one row of
// that expert's output on its rank, written there by the sender. Blocks own
// contiguous token ranges. Send: count the selections per expert (all of them
// and those before the block's range), send the counts row to every rank,
// rank the block's selections per expert in token order, cast its tokens to
// FP8 once, wait for every rank's counts, then one warp per selection stores
// the row at its final place; the last block sets the dispatch flag on every
// rank. Receive: wait for every rank's flag, transpose the FP8 scales into
// the column-major (or UE8M0-packed) output, add the statistics.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "ep/low_latency/device.cuh"

namespace epkit::ep::kernels {
namespace {

constexpr float k_fp8_max = 448.0f;
constexpr float k_fp8_max_inv = 1.0f / 448.0f;
constexpr float k_amax_floor = 1e-4f;  // an all-zero group still gets a finite scale

/// topk_idx[t][k]: the expert, -1 for none, -2 for an index outside
/// [-1, experts) (skipped; block 0 reports the first one).
__device__ __forceinline__ int expert_of(const LowLatencyDispatchParams& p, int t, int k) {
  const std::int64_t at = static_cast<std::int64_t>(t) * p.topk_stride + k;
  const std::int64_t e = p.topk_int64 ? static_cast<const std::int64_t*>(p.topk)[at]
                                      : static_cast<const std::int32_t*>(p.topk)[at];
  if (e >= 0 && e < p.c.region.num_experts) return static_cast<int>(e);
  if (e != -1 && blockIdx.x == 0 && p.c.mailbox != nullptr &&
      atomicCAS(const_cast<int*>(&p.c.mailbox->error), 0, k_bad_expert) == 0) {
    p.c.mailbox->error_rank = t;
    p.c.mailbox->error_value = e;
  }
  return e == -1 ? -1 : -2;
}

__device__ __forceinline__ void fp8_scales(float amax, bool round_scale, float& scale,
                                           float& scale_inv) {
  if (round_scale) {
    // scale_inv = 2^ceil(log2(amax / 448)), from the float's bits.
    const unsigned int bits = __float_as_uint(amax * k_fp8_max_inv);
    const int exponent =
        static_cast<int>((bits >> 23) & 0xffu) - 127 + ((bits & 0x7fffffu) != 0u ? 1 : 0);
    scale = __uint_as_float(static_cast<unsigned int>(127 - exponent) << 23);
    scale_inv = __uint_as_float(static_cast<unsigned int>(127 + exponent) << 23);
  } else {
    scale_inv = amax * k_fp8_max_inv;
    scale = k_fp8_max / amax;
  }
}

/// Casts the block's own tokens [t0, t1) into the cast rows: FP8 bytes, then
/// one fp32 scale_inv per 128 channels. A lane holds 8 channels, 16 lanes a
/// group; a warp covers 256 channels per step.
__device__ void cast_tokens(const LowLatencyDispatchParams& p, int t0, int t1, std::uint8_t* cast) {
  const LowLatencyRegion& g = p.c.region;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  const int n8 = g.hidden / 8;
  const int steps = (n8 + 31) / 32;
  for (int item = warp; item < (t1 - t0) * steps; item += warps) {
    const int t = t0 + item / steps;
    const int i = (item % steps) * 32 + lane;
    const bool active = i < n8;
    int4 v = make_int4(0, 0, 0, 0);
    if (active) v = load_stream(reinterpret_cast<const int4*>(p.x + t * p.x_stride) + i);
    const unsigned int w[4] = {static_cast<unsigned int>(v.x), static_cast<unsigned int>(v.y),
                               static_cast<unsigned int>(v.z), static_cast<unsigned int>(v.w)};
    float f[8];
    float amax = k_amax_floor;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      f[2 * j] = __uint_as_float(w[j] << 16);
      f[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
      amax = fmaxf(amax, fmaxf(fabsf(f[2 * j]), fabsf(f[2 * j + 1])));
    }
#pragma unroll
    for (int m = 8; m >= 1; m >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
    float scale, scale_inv;
    fp8_scales(amax, p.round_scale, scale, scale_inv);
    if (!active) continue;
    unsigned int packed[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(
          make_float2(f[4 * j] * scale, f[4 * j + 1] * scale), __NV_SATFINITE, __NV_E4M3);
      const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(
          make_float2(f[4 * j + 2] * scale, f[4 * j + 3] * scale), __NV_SATFINITE, __NV_E4M3);
      packed[j] = static_cast<unsigned int>(lo) | (static_cast<unsigned int>(hi) << 16);
    }
    std::uint8_t* row = cast + static_cast<std::int64_t>(t) * g.cast_pitch;
    reinterpret_cast<uint2*>(row)[i] = make_uint2(packed[0], packed[1]);
    if ((lane & 15) == 0) reinterpret_cast<float*>(row + g.hidden)[i / 16] = scale_inv;
  }
}

/// Across nodes with BF16: the block's own tokens [t0, t1) copied into the
/// cast rows, so that a put to another node reads a registered window (the
/// caller's x is not one).
__device__ void stage_bf16_tokens(const LowLatencyDispatchParams& p, int t0, int t1,
                                  std::uint8_t* cast) {
  const LowLatencyRegion& g = p.c.region;
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  const int n16 = 2 * g.hidden / 16;
  for (int t = t0 + warp; t < t1; t += warps)
    warp_copy<4>(reinterpret_cast<int4*>(cast + static_cast<std::int64_t>(t) * g.cast_pitch),
                 reinterpret_cast<const int4*>(p.x + t * p.x_stride), n16,
                 [](const int4* q) { return load_stream(q); });
}

/// Where source s's slice metadata sits in a region's buffer: its L count
/// words, its running total of rows (across nodes), then its rows' `token
/// << 8 | k`, packed: local expert le's from `first` (the rows of the
/// experts before it) on, so that a put to another node carries the entries
/// of the rows it sent and no more.
__device__ __forceinline__ std::int64_t meta_words(const LowLatencyRegion& g, std::int64_t meta,
                                                   int s) {
  return meta + static_cast<std::int64_t>(s) * g.meta_pitch;
}
__device__ __forceinline__ std::int64_t meta_tk(const LowLatencyRegion& g, std::int64_t meta, int s,
                                                int first) {
  return meta_words(g, meta, s) + 8 * (static_cast<std::int64_t>(g.local_experts) + 1) +
         4 * static_cast<std::int64_t>(first);
}

/// Rows of a slice: at most max_tokens are written (a count above is
/// refused by the receiver).
__device__ __forceinline__ int slice_fill(int count, int max_tokens) {
  return min(count, max_tokens);
}

/// Warp 0: the rank of each of the block's selections among this rank's
/// selections of the same expert, in (token, k) order. `cursor` starts as the
/// counts before the block's range; -1 for a selection of no expert.
__device__ void rank_selections(const LowLatencyDispatchParams& p, int t0, int t1, int* cursor,
                                int* slots) {
  const int lane = threadIdx.x & 31;
  const int first = t0 * p.num_topk;
  const int end = t1 * p.num_topk;
  const unsigned int below = (1u << lane) - 1u;
  for (int chunk = first; chunk < end; chunk += 32) {
    const int i = chunk + lane;
    const int e = i < end ? expert_of(p, i / p.num_topk, i % p.num_topk) : -1;
    // Lanes without an expert get keys no expert has, so they group alone.
    const int key = e >= 0 ? e : p.c.region.num_experts + lane;
    const unsigned int peers = __match_any_sync(0xffffffffu, key);
    const int start = e >= 0 ? cursor[e] : 0;
    __syncwarp();
    if (e >= 0 && lane == 31 - __clz(peers)) cursor[e] = start + __popc(peers);
    if (i < end) slots[i - first] = e >= 0 ? start + __popc(peers & below) : -1;
    __syncwarp();
  }
}

/// A hooked dispatch's send (and every dispatch across nodes) after the
/// slots and the cast: each selection's row into slice [expert][this
/// rank][slot] of its destination's staging area; the last block then
/// publishes this rank's count of every expert to its owner (epoch << 32 |
/// rows, with a release after every row), then the flags. A destination on
/// another node gets its rows as puts (each adding 1 to its rows signal for
/// this rank) and its counts, the running total of rows put to it and the
/// `token << 8 | k` entries in one put after them (adding 1 to its count
/// signal). No wait on any peer.
__device__ void send_sliced(const LowLatencyDispatchParams& p, std::uint64_t epoch,
                            std::uint64_t sequence, int t0, int t1, const int* all,
                            const int* first, const int* slots, const std::uint8_t* cast) {
  const LowLatencyCommon& c = p.c;
  const LowLatencyRegion& g = c.region;
  const LowLatencyBufferOffsets& off = g.buffer[c.buffer];
  const int L = g.local_experts;
  const int R = c.num_ranks;
  const int me = c.rank;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  const std::int64_t row_bytes = p.fp8 ? g.cast_row_bytes : 2 * g.hidden;
  const int n16 = static_cast<int>(row_bytes / 16);
  std::uint8_t* own = c.base[me];
  for (int i = warp; i < (t1 - t0) * p.num_topk; i += warps) {
    const int slot = slots[i];
    // A slice holds max_tokens rows; more (an expert chosen twice by a
    // token) are not written and the count tells the receiver.
    if (slot < 0 || slot >= g.max_tokens) continue;
    const int t = t0 + i / p.num_topk;
    const int k = i % p.num_topk;
    const int e = expert_of(p, t, k);
    const int r = e / L;
    const std::int64_t row = (static_cast<std::int64_t>(e % L) * R + me) * g.max_tokens + slot;
    const std::int64_t stage_at = off.stage + row * 2 * g.hidden;
    if (!low_latency_mapped(c, r)) {
      // The source is a registered window: the cast row (FP8 or the BF16
      // copy). Its token entry travels with the counts.
      low_latency_put(c, r, stage_at, off.cast + static_cast<std::int64_t>(t) * g.cast_pitch,
                      row_bytes,
                      low_latency_signal(k_low_latency_dispatch_kind, 1, c.buffer, me, R));
      if (lane == 0)
        *reinterpret_cast<int*>(own + meta_tk(g, off.send_meta, r, first[e] + slot)) = t << 8 | k;
      continue;
    }
    auto* dst = low_latency_array<int4>(c, r, stage_at);
    if (p.fp8)
      warp_copy<4>(
          dst, reinterpret_cast<const int4*>(cast + static_cast<std::int64_t>(t) * g.cast_pitch),
          n16, [](const int4* q) { return load_peer(q); });
    else
      warp_copy<4>(dst, reinterpret_cast<const int4*>(p.x + t * p.x_stride), n16,
                   [](const int4* q) { return load_stream(q); });
    if (lane == 0)
      *low_latency_array<int>(c, r, meta_tk(g, off.slice_meta, me, first[e] + slot)) = t << 8 | k;
  }
  const std::uint64_t tag = (epoch & 0xffffffffull) << 32;
  low_latency_send_done(c, epoch, sequence, false, [&] {
    for (int e = threadIdx.x; e < g.num_experts; e += blockDim.x) {
      const int r = e / L;
      const std::uint64_t word = tag | static_cast<std::uint32_t>(all[e]);
      if (low_latency_mapped(c, r))
        store_release_sys(
            low_latency_array<std::uint64_t>(c, r, meta_words(g, off.slice_meta, me)) + e % L,
            word);
      else
        reinterpret_cast<std::uint64_t*>(own + meta_words(g, off.send_meta, r))[e % L] = word;
    }
    if (!c.net.on) return;
    __threadfence_system();
    __syncthreads();
    // The count words, the running total and the entries of the rows sent
    // (the last expert's first entry plus its rows: every row put to r).
    for (int r = warp; r < R; r += warps) {
      if (low_latency_mapped(c, r)) continue;
      const int last = r * L + L - 1;
      const int rows = first[last] + slice_fill(all[last], g.max_tokens);
      if (lane == 0) {
        reinterpret_cast<std::uint64_t*>(own + meta_words(g, off.send_meta, r))[L] =
            low_latency_add_sent_rows(c, k_low_latency_dispatch_kind, r,
                                      static_cast<std::uint64_t>(rows));
        __threadfence_system();
      }
      __syncwarp();
      low_latency_put(c, r, meta_words(g, off.slice_meta, me), meta_words(g, off.send_meta, r),
                      8 * (static_cast<std::int64_t>(L) + 1) + 4 * static_cast<std::int64_t>(rows),
                      low_latency_signal(k_low_latency_dispatch_kind, 0, c.buffer, me, R));
    }
  });
}

__device__ void dispatch_send(const LowLatencyDispatchParams& p, std::uint64_t epoch,
                              std::uint64_t sequence, int* smem) {
  const LowLatencyCommon& c = p.c;
  const LowLatencyRegion& g = c.region;
  const LowLatencyBufferOffsets& off = g.buffer[c.buffer];
  const int E = g.num_experts;
  const int L = g.local_experts;
  const int me = c.rank;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  const int per_block = (p.num_tokens + gridDim.x - 1) / gridDim.x;
  const int t0 = min(static_cast<int>(blockIdx.x) * per_block, p.num_tokens);
  const int t1 = min(t0 + per_block, p.num_tokens);
  int* all = smem;            // [E] selections per expert, all tokens
  int* cursor = smem + E;     // [E] those before t0, then the running rank
  int* base = smem + 2 * E;   // [E] first row of this rank's selections
  int* slots = smem + 3 * E;  // [(t1 - t0) * topk]

  for (int e = threadIdx.x; e < E; e += blockDim.x) all[e] = cursor[e] = 0;
  __syncthreads();
  const int before = t0 * p.num_topk;
  for (int i = threadIdx.x; i < p.num_tokens * p.num_topk; i += blockDim.x) {
    const int e = expert_of(p, i / p.num_topk, i % p.num_topk);
    if (e < 0) continue;
    atomicAdd(&all[e], 1);
    if (i < before) atomicAdd(&cursor[e], 1);
  }
  __syncthreads();

  // A hooked dispatch (a send-only kernel) never waits on a peer: its rows
  // go into this rank's own slice of each destination's staging area, the
  // counts after them, and the hook's receive packs the outputs
  // (docs/ep-engine.md, "Across nodes, and a send half that never waits").
  const bool sliced = c.phases == k_low_latency_send || c.net.on;
  // Otherwise the counts row to every rank first: every rank's rows wait for
  // them. A rank whose last dispatch on this buffer has not finished its
  // send (some block not yet past reading the counts: possible only if the
  // hook of that dispatch was never called) must not see them overwritten.
  const LowLatencyHeader* mine = low_latency_header(c, me);
  const std::uint64_t previous = load_volatile(&mine->dispatch_epoch[c.buffer]);
  for (int r = blockIdx.x; !sliced && r < c.num_ranks; r += gridDim.x) {
    if (threadIdx.x == 0)
      low_latency_wait_one(c, &mine->dispatch_flag[c.buffer][r], previous, r,
                           k_low_latency_wait_dispatch);
    __syncthreads();
    int* row = low_latency_array<int>(c, r, off.counts) + static_cast<std::int64_t>(me) * E;
    for (int e = threadIdx.x; e < E; e += blockDim.x) row[e] = all[e];
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0)
      store_release_sys(&low_latency_header(c, r)->count_flag[c.buffer][me], epoch);
  }
  if (warp == 0) rank_selections(p, t0, t1, cursor, slots);
  std::uint8_t* cast = low_latency_array<std::uint8_t>(c, me, off.cast);
  if (p.fp8)
    cast_tokens(p, t0, t1, cast);
  else if (c.net.on)
    stage_bf16_tokens(p, t0, t1, cast);
  if (sliced) {
    // base[e]: the entries of the owner's earlier experts in this rank's
    // metadata part (their rows, packed).
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
      int sum = 0;
      for (int q = e - e % L; q < e; ++q) sum += slice_fill(all[q], g.max_tokens);
      base[e] = sum;
    }
    __syncthreads();  // the slots, the cast rows, the bases
    send_sliced(p, epoch, sequence, t0, t1, all, base, slots, cast);
    return;
  }
  if (warp == 0)
    low_latency_wait_flags(c, low_latency_header(c, me)->count_flag[c.buffer], epoch,
                           k_low_latency_wait_counts, false);
  __syncthreads();

  // counts[s][e] of sources s < me come before this rank's rows of e.
  const int* counts = low_latency_array<int>(c, me, off.counts);
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int sum = 0;
    for (int s = 0; s < me; ++s) sum += load_volatile(counts + s * E + e);
    base[e] = sum;
  }
  if (blockIdx.x == 0) {
    // Where each source's rows of this rank's experts start.
    auto* range = low_latency_array<long long>(c, me, off.layout_range);
    int* recv_count = low_latency_array<int>(c, me, off.recv_count);
    for (int i = threadIdx.x; i < L * c.num_ranks; i += blockDim.x) {
      const int le = i / c.num_ranks;
      const int s = i % c.num_ranks;
      const int e = me * L + le;
      int first = 0;
      for (int q = 0; q < s; ++q) first += load_volatile(counts + q * E + e);
      const int n = load_volatile(counts + s * E + e);
      range[i] = (static_cast<long long>(first) << 32) | static_cast<long long>(n);
      if (s == c.num_ranks - 1) recv_count[le] = first + n;
    }
  }
  __syncthreads();

  const int n16 = (p.fp8 ? g.hidden : 2 * g.hidden) / 16;
  for (int i = warp; i < (t1 - t0) * p.num_topk; i += warps) {
    const int slot = slots[i];
    if (slot < 0) continue;
    const int t = t0 + i / p.num_topk;
    const int k = i % p.num_topk;
    const int e = expert_of(p, t, k);
    const int r = e / L;
    const std::int64_t row = static_cast<std::int64_t>(e % L) * g.rows_per_expert + base[e] + slot;
    if (p.fp8) {
      const std::uint8_t* src = cast + static_cast<std::int64_t>(t) * g.cast_pitch;
      auto* dst = low_latency_array<int4>(c, r, off.recv_x + row * g.hidden);
      // The cast rows were written by this block: plain loads, not the
      // read-only path.
      warp_copy<4>(dst, reinterpret_cast<const int4*>(src), n16,
                   [](const int4* q) { return load_peer(q); });
      const float* scales = reinterpret_cast<const float*>(src + g.hidden);
      float* dst_scales = low_latency_array<float>(c, r, off.scale_rows) + row * g.num_scales;
      for (int j = lane; j < g.num_scales; j += 32) dst_scales[j] = scales[j];
    } else {
      auto* dst = low_latency_array<int4>(c, r, off.recv_x + row * 2 * g.hidden);
      warp_copy<4>(dst, reinterpret_cast<const int4*>(p.x + t * p.x_stride), n16,
                   [](const int4* q) { return load_stream(q); });
    }
    if (lane == 0) {
      low_latency_array<int>(c, r, off.src_info)[row] = t;
      low_latency_array<int>(c, r, off.src_slot)[row] = (me << 8) | k;
    }
  }
  low_latency_send_done(c, epoch, sequence, false);
}

/// One thread: source `rank`'s count word of this epoch (the low 32 bits of
/// the epoch in the high half, compared modulo 2^32): waits for it, bounded;
/// a later epoch means the source has already written its next dispatch
/// here (a hook more than one operation late), a count over max_tokens is
/// refused. Returns the rows.
__device__ int slice_rows(const LowLatencyCommon& c, const std::uint64_t* word, std::uint64_t epoch,
                          int rank) {
  const auto want = static_cast<std::uint32_t>(epoch);
  const auto behind = [&](std::uint64_t w) {
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(w >> 32) - want) < 0;
  };
  std::uint64_t w = load_acquire_sys(word);
  if (behind(w)) {
    const std::uint64_t t0 = global_timer_ns();
    while (behind(w = load_acquire_sys(word)))
      if (global_timer_ns() - t0 > c.timeout_ns)
        fail(c.mailbox, k_timeout_low_latency, rank, k_low_latency_wait_dispatch);
  }
  if (static_cast<std::uint32_t>(w >> 32) != want)
    fail(c.mailbox, k_timeout_low_latency, rank, k_low_latency_overwritten);
  const auto rows = static_cast<std::uint32_t>(w);
  if (rows > static_cast<std::uint32_t>(c.region.max_tokens))
    fail(c.mailbox, k_timeout_low_latency, rank, k_low_latency_bad_count);
  return static_cast<int>(rows);
}

/// Local expert `le`'s FP8 scales, from the rows' contiguous copies into
/// the column-major (or UE8M0-packed) output: the block's threads a row each.
__device__ void transpose_scales(const LowLatencyDispatchParams& p, int le, int n) {
  const LowLatencyCommon& c = p.c;
  const LowLatencyRegion& g = c.region;
  const LowLatencyBufferOffsets& off = g.buffer[c.buffer];
  const float* rows = low_latency_array<float>(c, c.rank, off.scale_rows);
  const int S = g.num_scales;
  const std::int64_t RM = g.rows_per_expert;
  for (int row = threadIdx.x; row < n; row += blockDim.x) {
    const int* src = reinterpret_cast<const int*>(rows + (le * RM + row) * S);
    if (p.ue8m0) {
      // Four scales' exponent bytes per int32, low byte first.
      auto* out = low_latency_array<unsigned int>(c, c.rank, off.recv_scales) + le * (S / 4) * RM;
      for (int q = 0; q < S / 4; ++q) {
        unsigned int word = 0;
        for (int j = 0; j < 4; ++j)
          word |= ((static_cast<unsigned int>(load_cg(src + 4 * q + j)) >> 23) & 0xffu) << (8 * j);
        out[q * RM + row] = word;
      }
    } else {
      auto* out = low_latency_array<int>(c, c.rank, off.recv_scales) + le * S * RM;
      for (int q = 0; q < S; ++q) out[q * RM + row] = load_cg(src + q);
    }
  }
}

/// A hooked dispatch's receive (and every dispatch's across nodes): every
/// source's count words of this epoch, then each block packs its local
/// experts' slices in source order into the outputs today's layout has
/// (recv_x, scale rows, src_info, src_slot, layout_range, recv_count), checks
/// that no slice moved on meanwhile, and transposes the scales.
__device__ void receive_sliced(const LowLatencyDispatchParams& p, std::uint64_t epoch,
                               std::uint64_t sequence) {
  const LowLatencyCommon& c = p.c;
  const LowLatencyRegion& g = c.region;
  const LowLatencyBufferOffsets& off = g.buffer[c.buffer];
  const int L = g.local_experts;
  const int R = c.num_ranks;
  const int T = g.max_tokens;
  const std::int64_t RM = g.rows_per_expert;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  std::uint8_t* own = c.base[c.rank];
  const auto words = [&](int s) {
    return reinterpret_cast<const std::uint64_t*>(own + meta_words(g, off.slice_meta, s));
  };
  const auto source_rows = [&](int s) {
    int n = 0;
    for (int le = 0; le < L; ++le) n += slice_rows(c, words(s) + le, epoch, s);
    return n;
  };
  if (c.net.on) {
    low_latency_arrivals(c, epoch, sequence, k_low_latency_dispatch_kind,
                         &low_latency_header(c, c.rank)->dispatch_ready[c.buffer],
                         [&](int s) -> std::uint64_t {
                           const int n = source_rows(s);
                           if (low_latency_mapped(c, s)) return 0;
                           // A running total below this operation's own rows is not one.
                           const std::uint64_t total = load_acquire_sys(words(s) + L);
                           if (total < static_cast<std::uint64_t>(n))
                             fail(c.mailbox, k_timeout_low_latency, s, k_low_latency_bad_count);
                           return total;
                         });
  } else {
    // Warp 0 of every block, a lane a source: its counts of every local
    // expert are here.
    if (warp == 0)
      for (int s = lane; s < R; s += 32) {
        const long long start = clock64();
        source_rows(s);
        if (blockIdx.x == 0 && c.wait_stats != nullptr)
          atomicAdd(reinterpret_cast<unsigned long long*>(c.wait_stats + s),
                    static_cast<unsigned long long>(clock64() - start));
      }
    __syncthreads();
  }
  __shared__ int first[k_low_latency_max_ranks + 1];
  __shared__ int entries[k_low_latency_max_ranks];  // source s's entries before expert le
  const std::int64_t x_row = p.fp8 ? g.hidden : 2 * g.hidden;  // bytes of a recv_x row
  const int n16 = static_cast<int>(x_row / 16);
  for (int le = blockIdx.x; le < L; le += gridDim.x) {
    if (threadIdx.x == 0) {
      int sum = 0;
      for (int s = 0; s < R; ++s) {
        first[s] = sum;
        sum += static_cast<int>(static_cast<std::uint32_t>(load_acquire_sys(words(s) + le)));
      }
      first[R] = sum;
    }
    for (int s = threadIdx.x; s < R; s += blockDim.x) {
      int sum = 0;
      for (int q = 0; q < le; ++q)
        sum += slice_fill(
            static_cast<int>(static_cast<std::uint32_t>(load_acquire_sys(words(s) + q))), T);
      entries[s] = sum;
    }
    __syncthreads();
    const int total = first[R];
    for (int s = threadIdx.x; s < R; s += blockDim.x)
      low_latency_array<long long>(c, c.rank, off.layout_range)[le * R + s] =
          (static_cast<long long>(first[s]) << 32) |
          static_cast<long long>(first[s + 1] - first[s]);
    if (threadIdx.x == 0) {
      low_latency_array<int>(c, c.rank, off.recv_count)[le] = total;
      if (p.cumulative_stats != nullptr) atomicAdd(p.cumulative_stats + le, total);
    }
    for (int i = warp; i < total; i += warps) {
      const int s = low_latency_holder(first, R, i);  // the source whose rows hold i
      const int slot = i - first[s];
      const std::int64_t from = (static_cast<std::int64_t>(le) * R + s) * T + slot;
      const std::int64_t to = le * RM + i;
      const std::uint8_t* src =
          low_latency_array<std::uint8_t>(c, c.rank, off.stage) + from * 2 * g.hidden;
      warp_copy<4>(low_latency_array<int4>(c, c.rank, off.recv_x + to * x_row),
                   reinterpret_cast<const int4*>(src), n16,
                   [](const int4* q) { return load_cg(q); });
      if (p.fp8) {
        const auto* scales = reinterpret_cast<const int*>(src + g.hidden);
        int* dst = low_latency_array<int>(c, c.rank, off.scale_rows) + to * g.num_scales;
        for (int j = lane; j < g.num_scales; j += 32) dst[j] = load_cg(scales + j);
      }
      if (lane == 0) {
        const int tk = load_cg(
            reinterpret_cast<const int*>(own + meta_tk(g, off.slice_meta, s, entries[s] + slot)));
        // The combine sends this row to that token's place on s: a token
        // outside s's tokens (a corrupt entry) must not address memory.
        if (tk < 0 || (tk >> 8) >= T || (tk & 0xff) >= k_low_latency_max_topk)
          fail(c.mailbox, k_timeout_low_latency, s, k_low_latency_bad_count);
        low_latency_array<int>(c, c.rank, off.src_info)[to] = tk >> 8;
        low_latency_array<int>(c, c.rank, off.src_slot)[to] = (s << 8) | (tk & 0xff);
      }
    }
    __syncthreads();
    // A source whose word moved on wrote its next dispatch into its slice
    // while it was read.
    for (int s = threadIdx.x; s < R; s += blockDim.x) slice_rows(c, words(s) + le, epoch, s);
    if (p.fp8) transpose_scales(p, le, total);
    __syncthreads();
  }
}

__device__ void dispatch_receive(const LowLatencyDispatchParams& p, std::uint64_t epoch,
                                 std::uint64_t sequence) {
  const LowLatencyCommon& c = p.c;
  const LowLatencyRegion& g = c.region;
  const LowLatencyBufferOffsets& off = g.buffer[c.buffer];
  if (c.phases == k_low_latency_recv || c.net.on) {
    receive_sliced(p, epoch, sequence);
    return;
  }
  if (threadIdx.x < 32)
    low_latency_wait_flags(c, low_latency_header(c, c.rank)->dispatch_flag[c.buffer], epoch,
                           k_low_latency_wait_dispatch, blockIdx.x == 0);
  __syncthreads();
  const int* recv_count = low_latency_array<int>(c, c.rank, off.recv_count);
  if (p.fp8)
    for (int le = blockIdx.x; le < g.local_experts; le += gridDim.x)
      transpose_scales(p, le, load_volatile(recv_count + le));
  if (blockIdx.x == 0 && p.cumulative_stats != nullptr)
    for (int le = threadIdx.x; le < g.local_experts; le += blockDim.x)
      atomicAdd(p.cumulative_stats + le, load_volatile(recv_count + le));
}

// Named "dispatch_..." with both phases in one function: DeepEP's
// test_low_latency.py profiles one kernel whose name has "::dispatch", twice per
// call with a receive hook.
__global__ void __launch_bounds__(k_low_latency_threads, 1)
    dispatch_low_latency(LowLatencyDispatchParams p) {
  extern __shared__ int smem[];
  const std::uint64_t epoch = low_latency_epoch(p.c);
  const std::uint64_t sequence = low_latency_sequence(p.c, k_low_latency_dispatch_kind);
  if (p.c.phases & k_low_latency_send) dispatch_send(p, epoch, sequence, smem);
  if (p.c.phases & k_low_latency_recv) dispatch_receive(p, epoch, sequence);
}

}  // namespace

std::size_t low_latency_dispatch_smem(int num_experts, int num_tokens, int num_topk,
                                      int num_blocks) {
  const int per_block = num_blocks > 0 ? (num_tokens + num_blocks - 1) / num_blocks : num_tokens;
  return sizeof(int) * (3 * static_cast<std::size_t>(num_experts) +
                        static_cast<std::size_t>(per_block) * static_cast<std::size_t>(num_topk));
}

cudaError_t launch_low_latency_dispatch(const LowLatencyDispatchParams& p, cudaStream_t stream) {
  const std::size_t smem =
      low_latency_dispatch_smem(p.c.region.num_experts, p.num_tokens, p.num_topk, p.num_blocks);
  dispatch_low_latency<<<p.num_blocks, k_low_latency_threads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
