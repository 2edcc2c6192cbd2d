// The network leg's device-side calls for the queue backends (proxy and
// emulated NIC), written once for host and device: the kernels run them, and
// the CPU tests run the very same functions from host threads against a
// RequestConsumer (docs/ep-internode.md, "Rebuild", "The request queue").
//
// The producer's algorithm over the request ring (claim by fetch-add, a
// bounded wait for room, write the slot, publish the ready word) is described
// in ep/network_leg/request_queue.h, whose consumer drains what these calls
// post. What differs between host and device is only the shim below: the
// atomics (libcu++'s cuda::atomic_ref at system scope on the device, because
// the ring is host-mapped memory a host thread reads; std::atomic_ref on the
// host), the clock of the bounded waits (the device's global timer, the host's
// steady_clock, both in nanoseconds) and the pause between two polls.
//
// Two translation units may compile this header differently: g++ (C++20)
// gives std::atomic_ref; nvcc (C++17, whose host pass has no std::atomic_ref)
// gives cuda::atomic_ref in both of its passes. Each compiler's functions live
// in an inline namespace of their own, so the two definitions never meet under
// one name; the types are shared.
#pragma once

#include <cstdint>

#include "ep/network_leg/leg.h"

#ifdef __CUDACC__
#include <cuda/atomic>
#define EPKIT_LEG_CALL __host__ __device__ inline
#define EPKIT_LEG_ABI nvcc_built
#else
#include <atomic>
#endif
#include <chrono>
#include <thread>
#ifndef EPKIT_LEG_CALL
#define EPKIT_LEG_CALL inline
#define EPKIT_LEG_ABI host_built
#endif

namespace epkit::ep::network_leg {

/// The ring's words as both sides address them (plain pointers into one
/// host-mapped allocation). Built from DeviceLeg by ring_of().
struct RequestRing {
  PutRequest* requests = nullptr;
  std::uint64_t* ready = nullptr;  ///< ticket + 1 once slot's request is whole
  std::uint32_t slots = 0;
  std::uint64_t* reserved = nullptr;  ///< producers' fetch-add counter (DeviceLeg::queue_tail)
  std::uint64_t* head = nullptr;      ///< the consumer's: every ticket below it is drained
  std::uint64_t* abandoned = nullptr;
  /// The consumer's: every ticket below it has had its source bytes read (or
  /// never will be). Trails head; what leg_flush waits on. May be null (a
  /// ring that offers no flush).
  std::uint64_t* done = nullptr;
};

/// A producer's outcome: plain values, the device returns the same.
enum class PostStatus : std::uint32_t {
  posted,     ///< for leg_flush: every ticket of the mark is done
  timed_out,  ///< no room (or, for leg_flush, no progress) for the whole timeout
  refused,    ///< bad arguments or a ring of none: checked before a ticket is taken
};

/// Producer step 1's outcome: `count` consecutive tickets from `ticket`.
struct Claim {
  PostStatus status = PostStatus::timed_out;
  std::uint64_t ticket = 0;
};

/// What one caller (a thread, or a warp's leader) has posted, for leg_flush:
/// one past its highest ticket. Starts at 0 (nothing to flush); the posting
/// calls raise it when given.
struct FlushMark {
  std::uint64_t end = 0;
};

inline namespace EPKIT_LEG_ABI {
namespace shim {

#ifdef __CUDACC__
// System scope: the other side of every word is a host thread (the proxy),
// or, for signals, a copy the host issued.
using Word = cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system>;
EPKIT_LEG_CALL std::uint64_t load_acquire(const std::uint64_t* word) {
  return Word(*const_cast<std::uint64_t*>(word)).load(cuda::std::memory_order_acquire);
}
EPKIT_LEG_CALL void store_release(std::uint64_t* word, std::uint64_t value) {
  Word(*word).store(value, cuda::std::memory_order_release);
}
EPKIT_LEG_CALL std::uint64_t fetch_add_relaxed(std::uint64_t* word, std::uint64_t add) {
  return Word(*word).fetch_add(add, cuda::std::memory_order_relaxed);
}
EPKIT_LEG_CALL void add_release(std::uint64_t* word, std::uint64_t add) {
  Word(*word).fetch_add(add, cuda::std::memory_order_release);
}
#else
using Word = std::atomic_ref<std::uint64_t>;
// The device reads head and done through const pointers; atomic_ref wants a
// mutable object, which the word is (the consumer writes it).
inline std::uint64_t load_acquire(const std::uint64_t* word) {
  return Word(*const_cast<std::uint64_t*>(word)).load(std::memory_order_acquire);
}
inline void store_release(std::uint64_t* word, std::uint64_t value) {
  Word(*word).store(value, std::memory_order_release);
}
inline std::uint64_t fetch_add_relaxed(std::uint64_t* word, std::uint64_t add) {
  return Word(*word).fetch_add(add, std::memory_order_relaxed);
}
inline void add_release(std::uint64_t* word, std::uint64_t add) {
  Word(*word).fetch_add(add, std::memory_order_release);
}
#endif

/// Nanoseconds on a monotone clock: the global timer on the device, the
/// steady clock on the host. Only differences are used.
EPKIT_LEG_CALL std::int64_t now_ns() {
#ifdef __CUDA_ARCH__
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return static_cast<std::int64_t>(t);
#else
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
#endif
}

/// Between two polls of a bounded wait: leaves the core (host) or the issue
/// slot (device) to others.
EPKIT_LEG_CALL void pause() {
#ifdef __CUDA_ARCH__
  __nanosleep(64);
#else
  std::this_thread::yield();
#endif
}

/// Spins until `reached()` or `timeout_ns` passes; true if reached. Tests once
/// before reading the clock, so a timeout of 0 is a single poll.
template <class Reached>
EPKIT_LEG_CALL bool wait_until(Reached reached, std::int64_t timeout_ns) {
  const std::int64_t start = now_ns();
  for (;;) {
    if (reached()) return true;
    if (now_ns() - start >= timeout_ns) return false;
    pause();
  }
}

}  // namespace shim

/// The ring a kernel posts to, from its DeviceLeg.
EPKIT_LEG_CALL RequestRing ring_of(const DeviceLeg& leg) {
  RequestRing ring;
  ring.requests = leg.requests;
  ring.ready = leg.queue_ready;
  ring.slots = leg.queue_slots;
  ring.reserved = leg.queue_tail;
  // The device only reads head and done; the host consumer writes them
  // through the same words, so the ring's view is not const.
  ring.head = const_cast<std::uint64_t*>(leg.queue_head);
  ring.abandoned = leg.queue_abandoned;
  ring.done = const_cast<std::uint64_t*>(leg.queue_done);
  return ring;
}

/// A ring a producer may post to: every word present and at least one slot.
EPKIT_LEG_CALL bool usable(const RequestRing& ring) {
  return ring.slots > 0 && ring.requests != nullptr && ring.ready != nullptr &&
         ring.reserved != nullptr && ring.head != nullptr && ring.abandoned != nullptr;
}

/// Producer step 1: `count` consecutive tickets from `ticket` with room in
/// the ring, or timed_out after waiting `timeout_ns` for the consumer (the
/// tickets are then counted abandoned: holes the consumer never passes).
/// `count` must be 1 to `slots` on a usable ring; otherwise refused at once,
/// before a ticket is taken (a ticket taken and never published would be a
/// hole). A caller holding unpublished tickets must not claim again: it would
/// wait for room only its own publication makes.
EPKIT_LEG_CALL Claim claim_slot(const RequestRing& ring, std::int64_t timeout_ns,
                                std::uint32_t count = 1) {
  if (!usable(ring) || count == 0 || count > ring.slots) return {PostStatus::refused, 0};
  // Relaxed: the ticket orders producers among themselves only; what the
  // slot's previous request needs is ordered by the acquire on head below.
  const std::uint64_t ticket = shim::fetch_add_relaxed(ring.reserved, count);
  const std::uint64_t last = ticket + count - 1;
  const std::uint64_t slots = ring.slots;
  const std::uint64_t* head = ring.head;
  if (shim::wait_until([&] { return last < shim::load_acquire(head) + slots; }, timeout_ns)) {
    return {PostStatus::posted, ticket};
  }
  shim::add_release(ring.abandoned, count);
  return {PostStatus::timed_out, ticket};
}

/// Producer step 2: where the claimed ticket's request goes (plain stores).
EPKIT_LEG_CALL PutRequest& slot_of(const RequestRing& ring, std::uint64_t ticket) {
  return ring.requests[ticket % ring.slots];
}

/// Producer step 3: the request in the ticket's slot is whole (release, last).
EPKIT_LEG_CALL void publish_slot(const RequestRing& ring, std::uint64_t ticket) {
  shim::store_release(&ring.ready[ticket % ring.slots], ticket + 1);
}

/// Steps 1 to 3 for `count` requests in one claim (a warp's leader posting
/// for its lanes): one fetch-add, every slot written and published before
/// returning. On `posted`, raises `mark` (if given) past the last ticket.
EPKIT_LEG_CALL PostStatus post_requests(const RequestRing& ring, const PutRequest* requests,
                                        std::uint32_t count, std::int64_t timeout_ns,
                                        FlushMark* mark = nullptr) {
  if (requests == nullptr) return PostStatus::refused;
  const Claim claim = claim_slot(ring, timeout_ns, count);
  if (claim.status != PostStatus::posted) return claim.status;
  for (std::uint32_t i = 0; i < count; ++i) slot_of(ring, claim.ticket + i) = requests[i];
  for (std::uint32_t i = 0; i < count; ++i) publish_slot(ring, claim.ticket + i);
  if (mark != nullptr && claim.ticket + count > mark->end) mark->end = claim.ticket + count;
  return PostStatus::posted;
}

/// Steps 1 to 3 for one request.
EPKIT_LEG_CALL PostStatus post_request(const RequestRing& ring, const PutRequest& request,
                                       std::int64_t timeout_ns, FlushMark* mark = nullptr) {
  return post_requests(ring, &request, 1, timeout_ns, mark);
}

/// A request the leg can carry: the peer inside the world; a signal index
/// inside the signal array when it adds (every rank's array has the leg's
/// num_signals entries); and something to do (bytes, a signal, or both).
EPKIT_LEG_CALL bool request_valid(const DeviceLeg& leg, const PutRequest& request) {
  if (request.peer < 0 || request.peer >= leg.world_size) return false;
  if (request.signal_add > 0 && request.signal.value >= leg.num_signals) return false;
  return request.bytes > 0 || request.signal_add > 0;
}

/// put(peer, dst_window, dst_offset, src_window, src_offset, bytes, signal,
/// add): posts one PutRequest. Refused, before a ticket is taken, for a bad
/// request (request_valid) or a leg without a request ring (GIN: its calls map
/// onto ncclGin instead). `mark` (optional) records the ticket for leg_flush.
EPKIT_LEG_CALL PostStatus leg_put(const DeviceLeg& leg, int peer, WindowId dst_window,
                                  std::uint64_t dst_offset, WindowId src_window,
                                  std::uint64_t src_offset, std::uint64_t bytes, SignalId signal,
                                  std::uint64_t add, std::int64_t timeout_ns,
                                  FlushMark* mark = nullptr, std::uint32_t channel = 0) {
  // In PutRequest's field order.
  const PutRequest request{peer,       channel, dst_window, src_window, dst_offset,
                           src_offset, bytes,   signal,     add};
  if (!request_valid(leg, request)) return PostStatus::refused;
  return post_request(ring_of(leg), request, timeout_ns, mark);
}

/// signal(peer, signal, add): a put of no bytes (credits, counts). `add` 0
/// is refused: it would carry nothing.
EPKIT_LEG_CALL PostStatus leg_signal(const DeviceLeg& leg, int peer, SignalId signal,
                                     std::uint64_t add, std::int64_t timeout_ns,
                                     FlushMark* mark = nullptr, std::uint32_t channel = 0) {
  return leg_put(leg, peer, WindowId{}, 0, WindowId{}, 0, 0, signal, add, timeout_ns, mark,
                 channel);
}

/// A leader's post of `count` requests (its warp's lanes') in one claim of
/// `count` tickets. All of them are checked first: one bad request refuses
/// the lot, and no ticket is taken.
EPKIT_LEG_CALL PostStatus leg_post_many(const DeviceLeg& leg, const PutRequest* requests,
                                        std::uint32_t count, std::int64_t timeout_ns,
                                        FlushMark* mark = nullptr) {
  if (requests == nullptr) return PostStatus::refused;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (!request_valid(leg, requests[i])) return PostStatus::refused;
  }
  return post_requests(ring_of(leg), requests, count, timeout_ns, mark);
}

/// wait(signal, value, timeout): spins until this rank's `signal` reaches
/// `value` (acquire: the bytes of every put whose add brought it there are
/// visible afterwards). False on expiry, and at once for a signal outside the
/// array or a leg without signals; the caller names the peer that owed it.
/// `peer` (optional): the rank that owes the signal; the wait is also false,
/// early, once that rank's process exited (DeviceLeg::exited). A wait on a
/// live peer runs its course even when another rank exited (that peer may
/// be slow, or finished and gone at the job's end), and a caller whose wait
/// expired names the exited rank, if any (leg_exited), rather than a peer
/// that may be alive and stuck behind it.
EPKIT_LEG_CALL bool leg_wait(const DeviceLeg& leg, SignalId signal, std::uint64_t value,
                             std::int64_t timeout_ns, int peer = -1) {
  if (leg.signals == nullptr || signal.value >= leg.num_signals) return false;
  const std::uint64_t* word = leg.signals + signal.value;
  const bool watched = leg.exited != nullptr && peer >= 0;
  std::uint32_t spins = 0;
  bool gone = false;
  const bool reached = shim::wait_until(
      [&] {
        if (shim::load_acquire(word) >= value) return true;
        // The exited word is host memory: read it now and then, not every spin.
        if (watched && (++spins & 63) == 0 &&
            shim::load_acquire(leg.exited) == static_cast<std::uint64_t>(peer) + 1)
          gone = true;
        return gone;
      },
      timeout_ns);
  return reached && !gone;
}

/// The rank whose process exited first, as the leg's watch saw it, or -1.
EPKIT_LEG_CALL int leg_exited(const DeviceLeg& leg) {
  if (leg.exited == nullptr) return -1;
  const std::uint64_t v = shim::load_acquire(leg.exited);
  return v == 0 ? -1 : static_cast<int>(v - 1);
}

/// flush(): the source bytes of every put recorded in `mark` have been read
/// by the leg, so the caller may overwrite them. It waits on the ring's done
/// word, not its head: head passing a ticket means only that the proxy took
/// the request out of the ring, while the bytes are read later, when the put
/// is carried out (after the pacing model's delay, or a network send). The
/// consumer advances done past a ticket once it has finished reading that
/// put's source (RequestConsumer::source_read). It says nothing about the
/// peer's side, which only signals tell. posted: flushed; timed_out: done did
/// not pass the mark within `timeout_ns` (a put that never lands, such as one
/// to a dropped rank, is never flushed); refused: a ring without a done word.
EPKIT_LEG_CALL PostStatus leg_flush(const DeviceLeg& leg, const FlushMark& mark,
                                    std::int64_t timeout_ns) {
  const RequestRing ring = ring_of(leg);
  if (!usable(ring) || ring.done == nullptr) return PostStatus::refused;
  const std::uint64_t* done = ring.done;
  const std::uint64_t end = mark.end;
  return shim::wait_until([&] { return shim::load_acquire(done) >= end; }, timeout_ns)
             ? PostStatus::posted
             : PostStatus::timed_out;
}

}  // namespace EPKIT_LEG_ABI
}  // namespace epkit::ep::network_leg
