#include "ep/network_leg/request_queue.h"

#include <atomic>

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

const char* to_string(PostStatus status) {
  switch (status) {
    case PostStatus::posted:
      return "posted";
    case PostStatus::timed_out:
      return "timed out: no room in the request queue (for a flush: its puts not yet carried out)";
    case PostStatus::refused:
      return "refused: a bad request (peer, signal, nothing to carry), a claim of 0 slots or "
             "more than the request queue holds, or no request queue";
  }
  return "unknown";
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
  leg.queue_done = &m_counters->done;
}

RequestConsumer::RequestConsumer(const RequestRing& ring)
    : m_ring(ring),
      m_head(load(ring.head, std::memory_order_relaxed)),
      m_done(ring.done != nullptr ? load(ring.done, std::memory_order_relaxed) : m_head) {}

std::size_t RequestConsumer::drain(std::size_t max,
                                   const std::function<void(const PutRequest&)>& on_request) {
  return drain_each(
      max, [&](std::uint64_t, const PutRequest& request) { on_request(request); }, false);
}

std::size_t RequestConsumer::drain_owing(
    std::size_t max, const std::function<void(std::uint64_t, const PutRequest&)>& on_request) {
  return drain_each(max, on_request, true);
}

std::size_t RequestConsumer::drain_each(
    std::size_t max, const std::function<void(std::uint64_t, const PutRequest&)>& on_request,
    bool owing) {
  std::size_t drained = 0;
  if (m_ring.slots == 0) return 0;
  while (drained < max) {
    const std::uint64_t slot = m_head % m_ring.slots;
    if (load(&m_ring.ready[slot], std::memory_order_acquire) != m_head + 1) break;
    // A copy: once head moves past it the slot belongs to the next producer.
    const PutRequest request = m_ring.requests[slot];
    // Owed before the call, which may already report it read.
    if (owing) m_owed.insert(m_head);
    on_request(m_head, request);
    ++m_head;
    store(m_ring.head, m_head, std::memory_order_release);
    ++drained;
  }
  if (drained > 0) publish_done();
  return drained;
}

void RequestConsumer::source_read(std::uint64_t ticket) {
  if (m_owed.erase(ticket) > 0) publish_done();
}

void RequestConsumer::publish_done() {
  // The lowest ticket still owed, or head when none is: monotone, since a
  // ticket becomes owed only at head, which never falls below done.
  const std::uint64_t done = m_owed.empty() ? m_head : *m_owed.begin();
  if (done == m_done || m_ring.done == nullptr) return;
  m_done = done;
  // Release: the reads of the sources below `done` happen before a flushing
  // producer's acquire that sees it, and so before it overwrites them.
  store(m_ring.done, done, std::memory_order_release);
}

std::uint64_t RequestConsumer::done() const {
  return m_done;
}

std::uint64_t RequestConsumer::pending() const {
  return load(m_ring.reserved, std::memory_order_relaxed) - m_head;
}

std::uint64_t RequestConsumer::abandoned() const {
  return load(m_ring.abandoned, std::memory_order_acquire);
}

}  // namespace epkit::ep::network_leg
