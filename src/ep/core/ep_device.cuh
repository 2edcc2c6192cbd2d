// Device-side building blocks of the EP engine: system-scope release and
// acquire (peers' memory is reached over NVLink through CUDA IPC mappings),
// bounded spins that report who never arrived, and the rank barrier.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "ep/core/kernels.h"

namespace epkit::ep::kernels {

__device__ __forceinline__ void store_release_sys(std::uint64_t* p, std::uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ std::uint64_t load_acquire_sys(const std::uint64_t* p) {
  std::uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ int load_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_release_gpu(int* p, int v) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ std::uint64_t global_timer_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Read-only streaming load: x is read once per token, keep it out of L1.
__device__ __forceinline__ int4 load_stream(const int4* p) {
  int4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// A load from a peer's memory (or ours) that another GPU wrote before the
// barrier we passed: must not come from a stale non-coherent cache line.
__device__ __forceinline__ int4 load_peer(const int4* p) {
  int4 v;
  asm volatile("ld.global.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// A load that skips L1 (served by L2): rows another kernel writes while
// this one runs (the network leg's chunks) must not come from a stale line.
__device__ __forceinline__ int4 load_l2(const int4* p) {
  int4 v;
  asm volatile("ld.global.cg.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ void store_vec(int4* p, const int4& v) {
  asm volatile("st.global.L1::no_allocate.v4.s32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x),
               "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

/// Exclusive scan over the block (every thread calls it); returns this
/// thread's prefix. Uses shared memory: __syncthreads before calling again.
__device__ __forceinline__ int block_exclusive_scan(int value) {
  __shared__ int warp_total[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  int inclusive = value;
  for (int d = 1; d < 32; d <<= 1) {
    int other = __shfl_up_sync(0xffffffffu, inclusive, d);
    if (lane >= d) inclusive += other;
  }
  if (lane == 31) warp_total[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int n_warps = blockDim.x >> 5;
    int total = lane < n_warps ? warp_total[lane] : 0;
    for (int d = 1; d < 32; d <<= 1) {
      int other = __shfl_up_sync(0xffffffffu, total, d);
      if (lane >= d) total += other;
    }
    if (lane < n_warps) warp_total[lane] = total;  // inclusive over warps
  }
  __syncthreads();
  int warp_base = warp == 0 ? 0 : warp_total[warp - 1];
  return warp_base + inclusive - value;
}

/// Adds 8 BF16 values (one 16-byte vector) to FP32 accumulators.
__device__ __forceinline__ void add_bf16x8(float (&acc)[8], const int4& v) {
  const unsigned int w[4] = {static_cast<unsigned int>(v.x), static_cast<unsigned int>(v.y),
                             static_cast<unsigned int>(v.z), static_cast<unsigned int>(v.w)};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    acc[2 * j] = acc[2 * j] + __uint_as_float(w[j] << 16);
    acc[2 * j + 1] = acc[2 * j + 1] + __uint_as_float(w[j] & 0xffff0000u);
  }
}

/// Rounds 8 FP32 accumulators to BF16 (nearest even), one 16-byte vector.
__device__ __forceinline__ int4 pack_bf16x8(const float (&acc)[8]) {
  unsigned int w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    unsigned int lo = __bfloat16_as_ushort(__float2bfloat16_rn(acc[2 * j]));
    unsigned int hi = __bfloat16_as_ushort(__float2bfloat16_rn(acc[2 * j + 1]));
    w[j] = lo | (hi << 16);
  }
  return make_int4(static_cast<int>(w[0]), static_cast<int>(w[1]), static_cast<int>(w[2]),
                   static_cast<int>(w[3]));
}

/// Records why a kernel stops and traps: the context is unusable after a
/// peer vanished, and the host reads the mailbox to name the cause.
__device__ __forceinline__ void fail(Mailbox* mailbox, int kind, int rank, std::int64_t value) {
  // The first failure is the cause; later ones (other blocks giving up
  // because of it) only trap.
  if (mailbox != nullptr && atomicCAS(const_cast<int*>(&mailbox->claimed), 0, 1) == 0) {
    mailbox->error_rank = rank;
    mailbox->error_value = value;
    __threadfence_system();
    mailbox->error = kind;
    __threadfence_system();
  }
  __trap();
}

/// Lanes 0..ranks-1 of the calling warp: tell every rank this one arrived
/// (when `signal_peers`), then wait until every rank did. The release store
/// publishes this thread's earlier writes, and those it observed through a
/// __syncthreads after __threadfence_system, to the peer that acquires it.
__device__ __forceinline__ void rank_barrier_warp(const SyncParams& s, std::uint64_t epoch,
                                                  bool signal_peers) {
  int lane = threadIdx.x & 31;
  if (lane < s.num_ranks) {
    if (signal_peers) store_release_sys(s.signal[lane] + s.rank, epoch);
    const std::uint64_t* mine = s.signal[s.rank] + lane;
    if (load_acquire_sys(mine) < epoch) {
      std::uint64_t start = global_timer_ns();
      while (load_acquire_sys(mine) < epoch) {
        // A peer that gave up on a rank of another node says which one, so
        // that this rank names the dead rank rather than the stuck peer.
        if (s.blame != nullptr) {
          int blamed = *reinterpret_cast<const volatile std::int32_t*>(s.blame);
          if (blamed > 0) fail(s.mailbox, k_peer_blamed, blamed - 1, lane);
        }
        if (global_timer_ns() - start > s.timeout_ns)
          fail(s.mailbox, k_timeout_barrier, lane, static_cast<std::int64_t>(epoch));
      }
    }
  }
  __syncwarp();
}

/// The epoch this rank passed last (see SyncParams::epoch); read by every
/// block at kernel start, before any block can advance it.
__device__ __forceinline__ std::uint64_t epoch_base(const SyncParams& s) {
  return *reinterpret_cast<const volatile std::uint64_t*>(s.epoch);
}

/// The end of a multi-block kernel that wrote to peers: each block fences
/// its writes and counts itself in; the last block to finish signals the
/// peers and waits for theirs, so the kernel ends only when every rank's
/// writes into this rank have landed.
__device__ __forceinline__ void grid_exit_barrier(const SyncParams& s, std::uint64_t epoch) {
  // Every other block has finished (and read the counter) when the last
  // one gets here: it advances the device epoch.
  __shared__ bool last;
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned int done = atomicAdd(s.grid_counter, 1u);
    last = done == gridDim.x - 1;
    if (last) *s.grid_counter = 0;  // nobody else touches it in this kernel any more
  }
  __syncthreads();
  if (last && threadIdx.x < 32) {
    __threadfence_system();
    rank_barrier_warp(s, epoch, true);
    if (threadIdx.x == 0) *s.epoch = epoch;
  }
}

/// LegChunks on the device: `seg` holds the segments' bounds (shared
/// memory, read once per block). The segment of row t: the last s with
/// seg[s] <= t.
__device__ __forceinline__ int leg_segment_of(const LegChunks& c, const int* seg, int t) {
  int s = 0;
  while (s + 1 < c.num_segments && seg[s + 1] <= t) ++s;
  return s;
}

/// Stops the kernel because a wait on the network leg expired
/// (k_timeout_network): `rank` owed the signal. The value packs what was
/// waited for (low byte: 0 its ready signal, 1 its rows, 2 this rank's
/// flush; k_leg_wait_exited added when `rank` is a rank whose process
/// exited, which the wait may not have been on), how far the signal got and
/// the value wanted (28 bits each), which the host words.
__device__ __forceinline__ void fail_network_wait(Mailbox* mailbox, int rank, std::int64_t what,
                                                  std::uint64_t seen, std::uint64_t wanted) {
  const auto clip = [](std::uint64_t v) { return static_cast<std::int64_t>(v & 0xfffffff); };
  fail(mailbox, k_timeout_network, rank, what | clip(seen) << 8 | clip(wanted) << 36);
}

/// One thread spins until a signal of the network leg (written by a peer,
/// system scope) reaches `number`, bounded: on expiry the kernel stops
/// naming `rank`, the sender of the rows it waited for.
/// `exited` (DeviceLeg::exited, may be null): the wait gives up at once
/// when `rank`'s process exited, and one that expires names a rank that
/// exited, if any, rather than `rank` (alive, it may be stuck behind it).
/// A wait on a live rank runs its course while another rank exits: that
/// rank may be slow, or done and gone at the job's end.
__device__ __forceinline__ void wait_leg_signal(const std::uint64_t* signal, std::uint64_t number,
                                                std::int64_t timeout_ns, int rank, Mailbox* mailbox,
                                                const std::uint64_t* exited = nullptr) {
  if (load_acquire_sys(signal) >= number) return;
  const std::uint64_t start = global_timer_ns();
  std::uint64_t seen = 0;
  std::uint32_t spins = 0;
  while ((seen = load_acquire_sys(signal)) < number) {
    const bool expired = global_timer_ns() - start > static_cast<std::uint64_t>(timeout_ns);
    // Host memory: read now and then, not every spin.
    if (exited != nullptr && (expired || (++spins & 63) == 0)) {
      const std::uint64_t gone = load_acquire_sys(exited);
      if (gone != 0 && (expired || gone == static_cast<std::uint64_t>(rank) + 1))
        fail_network_wait(mailbox, static_cast<int>(gone - 1), 1 | k_leg_wait_exited, seen, number);
    }
    if (expired) fail_network_wait(mailbox, rank, 1, seen, number);
  }
}

/// Lane 0 of the calling warp waits until row t's chunk has landed
/// (LegChunks arrival; rows of this node's segment are always there).
__device__ __forceinline__ void leg_wait_arrival(const LegChunks& c, const int* seg,
                                                 std::uint64_t number, int t, Mailbox* mailbox) {
  if ((threadIdx.x & 31) == 0) {
    const int s = leg_segment_of(c, seg, t);
    if (s != c.own) {
      const int chunk = chunk_of(t - seg[s], seg[s + 1] - seg[s], c.chunks);
      wait_leg_signal(
          c.signals + c.first_signal + static_cast<std::uint64_t>(s) * c.signal_stride + chunk,
          number, c.timeout_ns, s * c.ranks_per_node + c.local_rank, mailbox, c.exited);
    }
  }
  __syncwarp();
}

}  // namespace epkit::ep::kernels
