// Device helpers of ring mode (ring_kernels.h): bounded waits that name the
// rank they waited for (or the rank whose process exited, which the waited-
// for rank may be stuck behind), local signal adds for the own node's ring,
// and a warp's put or signal over the leg that stops the kernel when the leg
// does not take it.
#pragma once

#include <cuda/atomic>

#include "ep/core/ep_device.cuh"
#include "ep/internode/ring_kernels.h"
#include "ep/network_leg/device_calls.h"
#include "ep/network_leg/device_moves.cuh"

namespace epkit::ep::kernels::ring {

namespace nl = network_leg;

/// Stops the kernel: `rank` owed what `what` says (RingWait), or the rank
/// whose process exited, when one did (it is the one to name).
__device__ inline void give_up(const nl::DeviceLeg& leg, Mailbox* mailbox, int rank, int what,
                               std::uint64_t seen, std::uint64_t wanted) {
  std::int64_t w = what;
  if (const int gone = nl::leg_exited(leg); gone >= 0) {
    rank = gone;
    w |= k_leg_wait_exited;
  }
  fail_network_wait(mailbox, rank, w, seen, wanted);
}

/// One thread: until `*word` (written by a peer, system scope) reaches
/// `value`, bounded; on expiry the kernel stops naming `rank`. A wait on a
/// rank whose process exited ends at once.
__device__ inline void wait_word(const nl::DeviceLeg& leg, const std::uint64_t* word,
                                 std::uint64_t value, std::int64_t timeout_ns, int rank, int what,
                                 Mailbox* mailbox) {
  if (load_acquire_sys(word) >= value) return;
  const std::uint64_t start = global_timer_ns();
  std::uint32_t spins = 0;
  std::uint64_t seen = 0;
  while ((seen = load_acquire_sys(word)) < value) {
    const bool expired = global_timer_ns() - start > static_cast<std::uint64_t>(timeout_ns);
    if ((++spins & 63) == 0 && leg.exited != nullptr &&
        load_acquire_sys(leg.exited) == static_cast<std::uint64_t>(rank) + 1)
      give_up(leg, mailbox, rank, what, seen, value);
    if (expired) give_up(leg, mailbox, rank, what, seen, value);
  }
}

/// A signal of this rank's leg array.
__device__ inline void wait_signal(const nl::DeviceLeg& leg, std::uint32_t signal,
                                   std::uint64_t value, std::int64_t timeout_ns, int rank, int what,
                                   Mailbox* mailbox) {
  wait_word(leg, leg.signals + signal, value, timeout_ns, rank, what, mailbox);
}

/// Adds to one of this rank's own signals (the own node's ring, which never
/// crosses the leg): release, after the caller's writes.
__device__ inline void add_local(const nl::DeviceLeg& leg, std::uint32_t signal,
                                 std::uint64_t add) {
  __threadfence_system();
  cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system> word(leg.signals[signal]);
  word.fetch_add(add, cuda::std::memory_order_release);
}

/// A whole warp: `bytes` of this rank's window at src to `peer`'s at dst,
/// adding `add` to its `signal` once they landed; stops the kernel naming
/// the peer when the leg refuses it or never grants it.
__device__ inline void put(const nl::DeviceLeg& leg, int peer, std::uint64_t dst, std::uint64_t src,
                           std::uint64_t bytes, std::uint32_t signal, std::uint64_t add,
                           std::int64_t timeout_ns, Mailbox* mailbox) {
  const nl::PostStatus s = nl::leg_put_moved(leg, peer, nl::WindowId{0}, dst, nl::WindowId{0}, src,
                                             bytes, nl::SignalId{signal}, add, timeout_ns);
  if (s != nl::PostStatus::posted && (threadIdx.x & 31) == 0)
    give_up(leg, mailbox, peer, k_ring_wait_put, static_cast<std::uint64_t>(s), 0);
  __syncwarp();
}

/// A block's start and the end of its last warp (ns) into its profile
/// slots, when asked (RingCombineParams::profile; the caller zeroes them).
/// Every warp that reaches here counts; some roles' idle warps return early.
constexpr int k_profile_words = 6;
__device__ inline void profile_block(std::uint64_t* profile, std::uint64_t start) {
  if (profile == nullptr || (threadIdx.x & 31) != 0) return;
  auto* slot = reinterpret_cast<unsigned long long*>(profile + blockIdx.x * k_profile_words);
  if (threadIdx.x == 0) atomicExch(slot, static_cast<unsigned long long>(start));
  atomicMax(slot + 1, static_cast<unsigned long long>(global_timer_ns()));
}

/// Adds the ns since `since` to word `word` (2..5) of this block's profile
/// slots: time a role spent waiting or putting, by kind.
__device__ inline void profile_add(std::uint64_t* profile, int word, std::uint64_t since) {
  if (profile == nullptr) return;
  atomicAdd(reinterpret_cast<unsigned long long*>(profile + blockIdx.x * k_profile_words + word),
            static_cast<unsigned long long>(global_timer_ns() - since));
}

/// What a role of one channel sees: the operation's params, the shape, its
/// channel (block b runs role b % 3 of channel b / 3).
template <class Params>
struct Role {
  const Params& p;
  const RingShape& s;
  int c;
};

/// The body of a ring kernel: this block's role (three a channel), then its
/// profile slots.
template <class Params, class First, class Second, class Third>
__device__ void run_roles(const Params& p, First first, Second second, Third third) {
  const Role<Params> role{p, p.shape, static_cast<int>(blockIdx.x / 3)};
  const std::uint64_t start = global_timer_ns();
  switch (blockIdx.x % 3) {
    case 0:
      first(role);
      break;
    case 1:
      second(role);
      break;
    default:
      third(role);
  }
  profile_block(p.profile, start);
}

/// Copies `bytes` (a multiple of 16) with the lanes of a warp.
__device__ inline void warp_copy(std::uint8_t* dst, const std::uint8_t* src, int bytes) {
  const int lane = threadIdx.x & 31;
  auto* d = reinterpret_cast<int4*>(dst);
  const auto* s = reinterpret_cast<const int4*>(src);
  const int n = bytes >> 4;
  int i = lane;
  for (; i + 96 < n; i += 128) {
    const int4 a = __ldcg(s + i), b = __ldcg(s + i + 32), c = __ldcg(s + i + 64),
               e = __ldcg(s + i + 96);
    d[i] = a;
    d[i + 32] = b;
    d[i + 64] = c;
    d[i + 96] = e;
  }
  for (; i < n; i += 32) d[i] = __ldcg(s + i);
}

}  // namespace epkit::ep::kernels::ring
