#include "ep/network_leg/request_queue.h"

#include <atomic>
#include <chrono>
#include <thread>

namespace epkit::ep::network_leg {

namespace {

// The shared words are plain integers (device code addresses the same ones),
// so every access from the host goes through atomic_ref.
std::uint64_t load(std::uint64_t* word, std::memory_order order) {
  return std::atomic_ref<std::uint64_t>(*word).load(order);
}

void store(std::uint64_t* word, std::uint64_t value, std::memory_order order) {
  std::atomic_ref<std::uint64_t>(*word).store(value, order);
}

}  // namespace

RequestRing ring_of(const DeviceLeg& leg) {
  RequestRing ring;
  ring.requests = leg.requests;
  ring.ready = leg.queue_ready;
  ring.slots = leg.queue_slots;
  ring.reserved = leg.queue_tail;
  // The device only reads head; the host consumer writes it through the
  // same word, so the ring's view is not const.
  ring.head = const_cast<std::uint64_t*>(leg.queue_head);
  ring.abandoned = leg.queue_abandoned;
  return ring;
}

const char* to_string(PostStatus status) {
  switch (status) {
    case PostStatus::posted:
      return "posted";
    case PostStatus::timed_out:
      return "timed out waiting for room in the request queue";
    case PostStatus::refused:
      return "refused: a claim of 0 slots or more than the request queue holds";
  }
  return "unknown";
}

Claim claim_slot(const RequestRing& ring, std::int64_t timeout_ns, std::uint32_t count) {
  if (count == 0 || count > ring.slots) return {PostStatus::refused, 0};
  // Relaxed: the ticket orders producers among themselves only; what the
  // slot's previous request needs is ordered by the acquire on head below.
  const std::uint64_t ticket =
      std::atomic_ref<std::uint64_t>(*ring.reserved).fetch_add(count, std::memory_order_relaxed);
  const std::uint64_t last = ticket + count - 1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout_ns);
  for (;;) {
    if (last < load(ring.head, std::memory_order_acquire) + ring.slots) {
      return {PostStatus::posted, ticket};
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::yield();
  }
  std::atomic_ref<std::uint64_t>(*ring.abandoned).fetch_add(count, std::memory_order_release);
  return {PostStatus::timed_out, ticket};
}

void publish_slot(const RequestRing& ring, std::uint64_t ticket) {
  store(&ring.ready[ticket % ring.slots], ticket + 1, std::memory_order_release);
}

PostStatus post_request(const RequestRing& ring, const PutRequest& request,
                        std::int64_t timeout_ns) {
  const Claim claim = claim_slot(ring, timeout_ns);
  if (claim.status != PostStatus::posted) return claim.status;
  slot_of(ring, claim.ticket) = request;
  publish_slot(ring, claim.ticket);
  return PostStatus::posted;
}

RequestQueueStorage::RequestQueueStorage(std::uint32_t slots)
    : m_slots(slots),
      m_requests(std::make_unique<PutRequest[]>(slots)),
      m_ready(std::make_unique<std::uint64_t[]>(slots)),  // value-initialised: no ticket
      m_counters(std::make_unique<Counters>()) {}

RequestRing RequestQueueStorage::ring() {
  DeviceLeg leg;
  attach(leg);
  return ring_of(leg);
}

void RequestQueueStorage::attach(DeviceLeg& leg) {
  leg.requests = m_requests.get();
  leg.queue_ready = m_ready.get();
  leg.queue_slots = m_slots;
  leg.queue_tail = &m_counters->reserved;
  leg.queue_head = &m_counters->head;
  leg.queue_abandoned = &m_counters->abandoned;
}

RequestConsumer::RequestConsumer(const RequestRing& ring)
    : m_ring(ring), m_head(load(ring.head, std::memory_order_relaxed)) {}

std::size_t RequestConsumer::drain(std::size_t max,
                                   const std::function<void(const PutRequest&)>& on_request) {
  std::size_t drained = 0;
  if (m_ring.slots == 0) return 0;
  while (drained < max) {
    const std::uint64_t slot = m_head % m_ring.slots;
    if (load(&m_ring.ready[slot], std::memory_order_acquire) != m_head + 1) break;
    // A copy: once head moves past it the slot belongs to the next producer.
    const PutRequest request = m_ring.requests[slot];
    on_request(request);
    ++m_head;
    store(m_ring.head, m_head, std::memory_order_release);
    ++drained;
  }
  return drained;
}

std::uint64_t RequestConsumer::pending() const {
  return load(m_ring.reserved, std::memory_order_relaxed) - m_head;
}

std::uint64_t RequestConsumer::abandoned() const {
  return load(m_ring.abandoned, std::memory_order_acquire);
}

}  // namespace epkit::ep::network_leg
