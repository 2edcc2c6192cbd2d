// The request ring between the kernels (many producer threads) and the
// host proxy (one consumer) of the proxy and emulated backends
// (docs/ep-internode.md, "Rebuild", "The request queue"). The words live in
// host-mapped memory. The producer is written once for both sides
// (ep/network_leg/device_calls.h: cuda::atomic_ref on the device,
// std::atomic_ref on the host), so the shared layout is plain fixed-width
// integers.
//
// Words: `requests[slots]` (PutRequest), `ready[slots]` (one sequence word a
// slot), and four counters: `reserved` (the next ticket), `head` (the next
// ticket the consumer drains; every ticket below it is freed), `abandoned`
// (tickets whose producer gave up) and `done` (every ticket below it has had
// its source bytes read: what a producer's flush waits on). Tickets are 64-bit and never
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
// first. Head passing a ticket frees its slot; it does not mean the put's
// source bytes were read, which happens when the put is carried out. The
// consumer therefore keeps `done` apart: the lowest ticket whose source is
// still owed (head when none is), stored with release once the bytes are
// read, so a producer's flush that sees done pass its ticket (acquire) may
// reuse its source.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>

#include "ep/network_leg/device_calls.h"
#include "ep/network_leg/leg.h"

namespace epkit::ep::network_leg {

/// The producer's calls (RequestRing, ring_of, claim_slot, slot_of,
/// publish_slot, post_request and the leg's put/signal/wait/flush) live in
/// ep/network_leg/device_calls.h, shared by the kernels and the host.

const char* to_string(PostStatus status);

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
    alignas(64) std::uint64_t done = 0;  // the consumer writes it, flushing producers poll it
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
  /// freeing each slot after its call returns. Returns how many. The call
  /// must have finished reading the put's source bytes when it returns (or
  /// never read them): the ticket counts as done for flush at once.
  std::size_t drain(std::size_t max, const std::function<void(const PutRequest&)>& on_request);
  /// The same for a consumer that reads the source later (the proxy, when
  /// the put lands): each ticket stays owed, holding `done` below it, until
  /// source_read(ticket).
  std::size_t drain_owing(
      std::size_t max,
      const std::function<void(std::uint64_t ticket, const PutRequest&)>& on_request);
  /// The source bytes of the drained `ticket` have been read (or never will
  /// be): flush may pass it. For a copy an engine runs asynchronously, call it
  /// once the copy has completed, not when it was issued.
  void source_read(std::uint64_t ticket);
  /// The consumer's copy of *done: every ticket below it has been read.
  std::uint64_t done() const;
  /// Tickets claimed but not yet drained (some may still be being written).
  std::uint64_t pending() const;
  /// Producers that timed out: non-zero means a hole the ring never passes.
  std::uint64_t abandoned() const;
  std::uint64_t head() const { return m_head; }

 private:
  std::size_t drain_each(std::size_t max,
                         const std::function<void(std::uint64_t, const PutRequest&)>& on_request,
                         bool owing);
  void publish_done();

  RequestRing m_ring;
  std::uint64_t m_head = 0;        // the consumer's copy of *head: it alone writes it
  std::uint64_t m_done = 0;        // the value last stored into *done
  std::set<std::uint64_t> m_owed;  // drained tickets whose source is not read yet
};

}  // namespace epkit::ep::network_leg
