// The request ring between the kernels (many producer threads) and the
// host proxy (one consumer) of the proxy and emulated backends
// (docs/ep-internode.md, "Rebuild", "The request queue"). The words live in
// host-mapped memory; the device side will run the same algorithm with
// cuda::atomic_ref over the same words, the host uses std::atomic_ref, so the
// shared layout is plain fixed-width integers.
//
// Words: `requests[slots]` (PutRequest), `ready[slots]` (one sequence word a
// slot), and three counters: `reserved` (the next ticket), `head` (the next
// ticket the consumer drains; every ticket below it is freed) and
// `abandoned` (tickets whose producer gave up). Tickets are 64-bit and never
// wrap; ticket t lives in slot t % slots.
//
// Producer (claim, write, publish):
// 1. claim: t = fetch_add(reserved, 1) (relaxed: the ticket only orders
//    producers among themselves). Then wait for room: until t < head +
//    slots, reading head with acquire, so the consumer's reads of the slot's
//    previous request happen before this producer overwrites it. The wait is
//    bounded: on expiry the producer adds one to `abandoned` and returns
//    timed_out. Its ticket stays a hole the consumer cannot pass, which is
//    the point: a consumer that drains nothing for a whole timeout is dead,
//    the caller reports a fault and the leg is aborted; `abandoned` lets the
//    consumer tell the hole from a slow producer.
// 2. write the PutRequest into slot t % slots (plain stores).
// 3. publish: store t + 1 into ready[t % slots] with release, last. The
//    value names the ticket, not just "full": a slot's stale word from an
//    earlier lap (t + 1 - k * slots) or its initial 0 never equals the one the
//    consumer expects, so no word needs clearing and producers that finish
//    out of order cannot be mistaken for each other.
// Nothing waits on another producer: a producer blocks only on the consumer,
// provided no producer waits for room while it holds an unpublished ticket
// (the consumer would stop at that ticket and never make the room). So a
// producer publishes every ticket it holds before claiming again; one that
// posts several requests (a warp's leader for its lanes) claims them in one
// fetch-add of `count`, and waits for room for the last of them.
//
// Consumer (one thread): for h = head, while ready[h % slots] (acquire) ==
// h + 1, copy the request out, hand it on, then store head = h + 1 with
// release (freeing the slot). It stops at the first unpublished ticket, so
// requests leave in ticket order even when later tickets were published
// first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "ep/network_leg/leg.h"

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
};

/// The ring a kernel posts to, from its DeviceLeg.
RequestRing ring_of(const DeviceLeg& leg);

/// A producer's outcome: plain values, the device returns the same.
enum class PostStatus : std::uint32_t {
  posted,
  timed_out,  ///< no room for the whole timeout: the consumer is gone
  refused,    ///< count 0 or more than the ring's slots (or a ring of none): no ticket taken
};

const char* to_string(PostStatus status);

/// Producer step 1: `count` consecutive tickets from `ticket` with room in
/// the ring, or timed_out after waiting `timeout_ns` for the consumer (the
/// tickets are then abandoned). `count` must be 1 to `slots`; otherwise
/// refused at once, before a ticket is taken (a ticket taken and never
/// published would be a hole the consumer never passes).
struct Claim {
  PostStatus status = PostStatus::timed_out;
  std::uint64_t ticket = 0;
};
Claim claim_slot(const RequestRing& ring, std::int64_t timeout_ns, std::uint32_t count = 1);
/// Producer step 2: where the claimed ticket's request goes.
inline PutRequest& slot_of(const RequestRing& ring, std::uint64_t ticket) {
  return ring.requests[ticket % ring.slots];
}
/// Producer step 3: the request in the ticket's slot is whole (release).
void publish_slot(const RequestRing& ring, std::uint64_t ticket);
/// Steps 1 to 3: the host producer, the algorithm the device runs.
PostStatus post_request(const RequestRing& ring, const PutRequest& request,
                        std::int64_t timeout_ns);

/// The words of one ring in host memory (the CPU tests, the emulated
/// backend's own tests); the GPU backends place the same layout in
/// host-mapped memory.
class RequestQueueStorage {
 public:
  explicit RequestQueueStorage(std::uint32_t slots);
  RequestRing ring();
  /// Points `leg`'s queue fields at this ring.
  void attach(DeviceLeg& leg);

 private:
  struct Counters {
    alignas(64) std::uint64_t reserved = 0;  // producers write it, the consumer does not
    alignas(64) std::uint64_t head = 0;      // the consumer writes it, producers poll it
    alignas(64) std::uint64_t abandoned = 0;
  };
  std::uint32_t m_slots;
  std::unique_ptr<PutRequest[]> m_requests;
  std::unique_ptr<std::uint64_t[]> m_ready;
  std::unique_ptr<Counters> m_counters;
};

/// The host proxy's end: drains published requests in ticket order.
class RequestConsumer {
 public:
  explicit RequestConsumer(const RequestRing& ring);
  /// Hands up to `max` published requests to `on_request` in ticket order,
  /// freeing each slot after its call returns. Returns how many.
  std::size_t drain(std::size_t max, const std::function<void(const PutRequest&)>& on_request);
  /// Tickets claimed but not yet drained (some may still be being written).
  std::uint64_t pending() const;
  /// Producers that timed out: non-zero means a hole the ring never passes.
  std::uint64_t abandoned() const;
  std::uint64_t head() const { return m_head; }

 private:
  RequestRing m_ring;
  std::uint64_t m_head = 0;  // the consumer's copy of *head: it alone writes it
};

}  // namespace epkit::ep::network_leg
