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

/// Sleeps between polls that found nothing, longer each time up to a
/// microsecond: a long wait leaves its issue slots and the memory system to
/// the warps that copy beside it (every ring end polls), a short one stays
/// hot.
struct Backoff {
  unsigned ns = 0;
  __device__ void pause() {
    if (ns != 0) __nanosleep(ns);
    ns = ns == 0 ? 32u : min(2u * ns, 1024u);
  }
  __device__ void reset() { ns = 0; }
};

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
  Backoff backoff;
  while ((seen = load_acquire_sys(word)) < value) {
    const bool expired = global_timer_ns() - start > static_cast<std::uint64_t>(timeout_ns);
    if ((++spins & 63) == 0 && leg.exited != nullptr &&
        load_acquire_sys(leg.exited) == static_cast<std::uint64_t>(rank) + 1)
      give_up(leg, mailbox, rank, what, seen, value);
    if (expired) give_up(leg, mailbox, rank, what, seen, value);
    if (spins > 16) backoff.pause();
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

/// A block's profile words (RingCombineParams::profile): its start and end,
/// then ns spent waiting for NVLink rows or room, for credits, in puts, for
/// network chunks, and of the puts' time waiting for the leg's grant, then
/// the puts' count.
constexpr int k_profile_words = 8;
enum ProfileWord : int {
  k_profile_nvl = 2,
  k_profile_credit = 3,
  k_profile_put = 4,
  k_profile_chunk = 5,
  k_profile_grant = 6,
  k_profile_puts = 7,
};

/// Adds `value` to word `word` of this block's profile slots.
__device__ inline void profile_count(std::uint64_t* profile, int word, std::uint64_t value) {
  if (profile == nullptr) return;
  atomicAdd(reinterpret_cast<unsigned long long*>(profile + blockIdx.x * k_profile_words + word),
            static_cast<unsigned long long>(value));
}

/// A put a ring end posted and has yet to finish (copy its bytes and add
/// its signal once the leg grants it): one thread's.
struct PostedPut {
  nl::MovedPut moved;
  int peer = -1;
  std::uint32_t signal = 0;
  std::uint64_t add = 0;
  std::uint64_t bytes = 0;
  std::uint64_t posted_ns = 0;  ///< when it was posted, for the profile
};

/// One thread: posts a put to the leg (the pacing model starts carrying it
/// now); stops the kernel naming the peer when the leg refuses it.
__device__ inline PostedPut post_put(const nl::DeviceLeg& leg, int peer, std::uint64_t dst,
                                     std::uint64_t src, std::uint64_t bytes, std::uint32_t signal,
                                     std::uint64_t add, std::int64_t timeout_ns, Mailbox* mailbox,
                                     std::uint64_t* profile) {
  PostedPut out;
  out.posted_ns = profile != nullptr ? global_timer_ns() : 0;
  const nl::PutRequest request{
      peer, 0, nl::WindowId{0}, nl::WindowId{0}, dst, src, bytes, nl::SignalId{signal}, add};
  out.moved = nl::post_moved(leg, request, timeout_ns);
  if (out.moved.status != nl::PostStatus::posted)
    give_up(leg, mailbox, peer, k_ring_wait_put, static_cast<std::uint64_t>(out.moved.status), 0);
  out.peer = peer;
  out.signal = signal;
  out.add = add;
  out.bytes = bytes;
  return out;
}

/// One thread: waits for a posted put's grant (the pacing model carried
/// it); stops the kernel naming the peer when it never comes.
__device__ inline void await_grant(const nl::DeviceLeg& leg, const PostedPut& put,
                                   std::int64_t timeout_ns, Mailbox* mailbox,
                                   std::uint64_t* profile) {
  if (!nl::granted(leg, put.moved.ticket, timeout_ns))
    give_up(leg, mailbox, put.peer, k_ring_wait_put,
            static_cast<std::uint64_t>(nl::PostStatus::timed_out), 0);
  if (profile != nullptr) {
    profile_count(profile, k_profile_grant, global_timer_ns() - put.posted_ns);
    profile_count(profile, k_profile_puts, 1);
  }
}

/// A whole warp: `bytes` of this rank's window at src to `peer`'s at dst,
/// adding `add` to its `signal` once they landed; stops the kernel naming
/// the peer when the leg refuses it or never grants it.
__device__ inline void put(const nl::DeviceLeg& leg, int peer, std::uint64_t dst, std::uint64_t src,
                           std::uint64_t bytes, std::uint32_t signal, std::uint64_t add,
                           std::int64_t timeout_ns, Mailbox* mailbox,
                           std::uint64_t* profile = nullptr) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  unsigned long long ends[2] = {0, 0};
  if (lane == 0) {
    const PostedPut m =
        post_put(leg, peer, dst, src, bytes, signal, add, timeout_ns, mailbox, profile);
    await_grant(leg, m, timeout_ns, mailbox, profile);
    ends[0] = reinterpret_cast<unsigned long long>(m.moved.dst);
    ends[1] = reinterpret_cast<unsigned long long>(m.moved.src);
  }
  ends[0] = __shfl_sync(0xffffffffu, ends[0], 0);
  ends[1] = __shfl_sync(0xffffffffu, ends[1], 0);
  if (bytes > 0)
    nl::moves::copy(reinterpret_cast<std::uint8_t*>(ends[0]),
                    reinterpret_cast<const std::uint8_t*>(ends[1]), bytes, lane, 32);
  __threadfence_system();
  __syncwarp();
  if (lane == 0) nl::land_signal(leg, peer, nl::SignalId{signal}, add);
  __syncwarp();
}

/// Warps of a block that work one ring end together, several rows at once:
/// group `id` of `size` warps, this warp `index` in it. A group of more than
/// one warp meets at a named barrier of its own (1..15; 0 is the block's).
struct Group {
  int id = 0;
  int size = 1;
  int index = 0;
  __device__ bool lead() const { return index == 0 && (threadIdx.x & 31) == 0; }
  __device__ void sync() const {
    if (size == 1)
      __syncwarp();
    else
      asm volatile("bar.sync %0, %1;" ::"r"(id + 1), "r"(size * 32) : "memory");
  }
};

/// The block's `warps` warps as `groups` groups: an equal share each while
/// the groups fit the named barriers, else a warp each (then at most
/// `warps` groups: the callers' bound). A warp past the last group gets an
/// id >= groups: idle.
__device__ inline Group group_of(int groups, int warps) {
  const int warp = static_cast<int>(threadIdx.x >> 5);
  Group g;
  g.size = groups <= 15 ? max(1, warps / groups) : 1;
  g.id = warp / g.size;
  g.index = warp % g.size;
  return g;
}

/// Groups for ring ends that poll many rings in turn (a receiver's sub-
/// rings): one a ring while they fit the barriers, else 8 of 4 warps.
__device__ inline int polling_groups(int rings) {
  return rings <= 15 ? rings : 8;
}

/// What a polling group's leader read of one ring for the whole group: how
/// far its other end is (a tail or a head) and how far this end is.
struct Seen {
  std::uint64_t at;
  int done;
};

/// One NVLink sub-ring a polling group works (a dispatch receiver drains
/// it, a combine NVLink sender feeds it): the ring, the local rank at its
/// other end, the source node of its rows, their count and first row in
/// this rank's rows (output or input), the ring's row number at the call's
/// start, and the rows done so far (the group leader's alone).
struct SubRing {
  int ring;
  int other;
  int n;
  int rows;
  int first;
  int done;
  std::uint64_t start;
};

/// Every warp of `grp`: the leader reads how far the other end of `r` is
/// (`words[r.ring]`, a tail or a head, while r is not done) and how far
/// this end is, and the group acts on those two numbers alike. `slots` (two,
/// the group's own) are used in turn: a leader one step ahead never
/// overwrites what a slower warp of its group has yet to read.
__device__ inline Seen look(const Group& grp, Seen* slots, int& turn, const SubRing& r,
                            const std::uint64_t* words) {
  if (grp.lead()) slots[turn] = {r.done < r.rows ? load_acquire_sys(words + r.ring) : 0, r.done};
  grp.sync();
  const Seen seen = slots[turn];
  turn ^= 1;
  return seen;
}

/// The sub-rings of channel c a polling role works, every (local rank,
/// source node) of them, filled by the whole block (then a barrier), and
/// `start_of(ring)` each one's row number at the call's start.
template <class Params, class Start>
__device__ void fill_sub_rings(const Params& p, const RingShape& s, int c, SubRing* rings,
                               Start start_of) {
  const int N = s.nodes;
  for (int q = static_cast<int>(threadIdx.x); q < s.per_node * N;
       q += static_cast<int>(blockDim.x)) {
    SubRing& r = rings[q];
    r.other = q / N;
    r.n = q % N;
    r.ring = s.sub_ring(c, r.other, r.n);
    const int src = r.n * s.per_node + r.other;
    r.rows = p.routes.from_rank[src * s.channels + c];
    r.first = p.routes.base[src * s.channels + c];
    r.start = start_of(r.ring);
    r.done = 0;
  }
  __syncthreads();
}

/// The end of a polling group's round over its sub-rings (q = its id, then
/// every `groups`-th): hot again after a move, else a pause, and past
/// `timeout_ns` without a move the leader stops the kernel naming the
/// local rank at the other end of the first ring not done (`what`).
__device__ inline void end_round(const nl::DeviceLeg& leg, Mailbox* mailbox, const RingShape& s,
                                 const Group& grp, int groups, const SubRing* rings, bool moved,
                                 std::uint64_t now, std::uint64_t& since, Backoff& backoff,
                                 std::int64_t timeout_ns, int what) {
  if (moved) {
    backoff.reset();
    since = now;
    return;
  }
  backoff.pause();
  if (now - since <= static_cast<std::uint64_t>(timeout_ns) || !grp.lead()) return;
  for (int q = grp.id; q < s.per_node * s.nodes; q += groups)
    if (rings[q].done < rings[q].rows)
      give_up(leg, mailbox, s.node * s.per_node + rings[q].other, what,
              static_cast<std::uint64_t>(rings[q].done), static_cast<std::uint64_t>(rings[q].rows));
}

/// Every warp of `grp`: finishes the put its leader posted (`put`, the
/// leader's): once the leg grants it, the whole group copies its bytes,
/// then the leader adds its signal. `shared` (three words, the group's own)
/// carries the ends and the size from the leader to the others.
__device__ inline void group_finish(const nl::DeviceLeg& leg, const Group& grp,
                                    unsigned long long* shared, const PostedPut& put,
                                    std::int64_t timeout_ns, Mailbox* mailbox,
                                    std::uint64_t* profile) {
  if (grp.lead()) {
    await_grant(leg, put, timeout_ns, mailbox, profile);
    shared[0] = reinterpret_cast<unsigned long long>(put.moved.dst);
    shared[1] = reinterpret_cast<unsigned long long>(put.moved.src);
    shared[2] = put.bytes;
  }
  grp.sync();
  if (shared[2] > 0)
    nl::moves::copy(reinterpret_cast<std::uint8_t*>(shared[0]),
                    reinterpret_cast<const std::uint8_t*>(shared[1]), shared[2],
                    grp.index * 32 + static_cast<int>(threadIdx.x & 31), grp.size * 32);
  __threadfence_system();
  grp.sync();
  if (grp.lead()) nl::land_signal(leg, put.peer, nl::SignalId{put.signal}, put.add);
}

/// Entry `i` of a small per-rank array held in registers (a dynamic index
/// would put the array in local memory).
template <int Size>
__device__ inline std::uint64_t pick(const std::uint64_t (&a)[Size], int i) {
  std::uint64_t v = 0;
#pragma unroll
  for (int k = 0; k < Size; ++k) v = k == i ? a[k] : v;
  return v;
}

/// The global timer when a profile is asked, else 0 (no timer read on the
/// rows' path).
__device__ inline std::uint64_t stamp(const std::uint64_t* profile) {
  return profile != nullptr ? global_timer_ns() : 0;
}

/// A block's start and the end of its last warp (ns) into its profile
/// slots, when asked (the caller zeroes them). Every warp that reaches here
/// counts; some roles' idle warps return early.
__device__ inline void profile_block(std::uint64_t* profile, std::uint64_t start) {
  if (profile == nullptr || (threadIdx.x & 31) != 0) return;
  auto* slot = reinterpret_cast<unsigned long long*>(profile + blockIdx.x * k_profile_words);
  if (threadIdx.x == 0) atomicExch(slot, static_cast<unsigned long long>(start));
  atomicMax(slot + 1, static_cast<unsigned long long>(global_timer_ns()));
}

/// Adds the ns since `since` to word `word` (ProfileWord) of this block's
/// profile slots: time a role spent waiting or putting, by kind.
__device__ inline void profile_add(std::uint64_t* profile, int word, std::uint64_t since) {
  if (profile == nullptr) return;
  profile_count(profile, word, global_timer_ns() - since);
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
