#include "ep/network_leg/proxy_loop.h"

#include <fmt/format.h>

namespace epkit::ep::network_leg {

ProxyLoop::ProxyLoop(const std::vector<RequestRing>& rings, EmulatedPacing& pacing,
                     ProxyHooks hooks, std::size_t batch)
    : m_world(static_cast<int>(rings.size())),
      m_pacing(&pacing),
      m_hooks(std::move(hooks)),
      m_batch(batch) {
  m_rings.reserve(rings.size());
  for (int rank = 0; rank < m_world; ++rank) {
    m_rings.push_back({rank, RequestConsumer(rings[static_cast<std::size_t>(rank)])});
  }
}

ProxyLoop::ProxyLoop(int rank, int world_size, const RequestRing& ring, EmulatedPacing& pacing,
                     ProxyHooks hooks, std::size_t batch)
    : m_world(world_size), m_pacing(&pacing), m_hooks(std::move(hooks)), m_batch(batch) {
  m_rings.push_back({rank, RequestConsumer(ring)});
}

std::uint64_t ProxyLoop::pending() const {
  std::uint64_t total = 0;
  for (const auto& drained : m_rings) total += drained.consumer.pending();
  return total;
}

void ProxyLoop::set_fault(int rank, std::string reason) {
  if (!m_fault) m_fault = Fault{rank, std::move(reason)};
}

void ProxyLoop::drain_rank(Drained& drained, ProxyStep& stats) {
  const int rank = drained.rank;
  auto& consumer = drained.consumer;
  if (const auto abandoned = consumer.abandoned(); abandoned > 0) {
    set_fault(rank, fmt::format("rank {}: {} request(s) timed out waiting for room in its request "
                                "queue (the proxy drained nothing for a whole timeout)",
                                rank, abandoned));
  }
  stats.posted +=
      consumer.drain_owing(m_batch, [&](std::uint64_t ticket, const PutRequest& request) {
        if (request.peer < 0 || request.peer >= m_world) {
          set_fault(rank, fmt::format("rank {} posted a put to rank {}, outside a world of {}",
                                      rank, request.peer, m_world));
          consumer.source_read(ticket);  // dropped: its source is never read
          return;
        }
        if (m_hooks.check) {
          if (auto checked = m_hooks.check(rank, request); !checked.ok()) {
            set_fault(rank, checked.error().message);
            consumer.source_read(ticket);
            return;
          }
        }
        auto id =
            m_pacing->post(rank, request.peer, request.bytes, request.signal, request.signal_add);
        if (!id.ok()) {
          set_fault(rank, id.error().message);
          consumer.source_read(ticket);
          return;
        }
        // A bare signal has no source to hold; a put's is read when it lands.
        if (request.bytes == 0) consumer.source_read(ticket);
        m_posted.emplace(id.value(), Posted{rank, ticket, request});
      });
}

Result<void> ProxyLoop::apply(const Completion& landed) {
  const auto it = m_posted.find(landed.id);
  if (it == m_posted.end()) return {};  // not one of ours
  const PutRequest request = it->second.request;
  const std::uint64_t ticket = it->second.ticket;
  m_posted.erase(it);
  if (m_hooks.land) {
    EPKIT_TRY(m_hooks.land(landed.src, ticket, request));
    if (request.bytes > 0) source_read(landed.src, ticket);
    return {};
  }
  // Bytes before the signal: a waiter that sees the signal reads them.
  if (request.bytes > 0) {
    EPKIT_TRY(m_hooks.copy(landed.src, request));
    // A queued copy has not read its source yet: the ticket waits for the
    // step's fence to complete.
    if (m_hooks.fence) {
      m_unfenced.emplace_back(landed.src, ticket);
    } else {
      source_read(landed.src, ticket);
    }
  }
  if (request.signal_add > 0) {
    auto& value = m_signals[{landed.dst, request.signal.value}];
    value += request.signal_add;
    EPKIT_TRY(m_hooks.write_signal(landed.dst, request.signal, value));
  }
  return {};
}

void ProxyLoop::source_read(int src, std::uint64_t ticket) {
  // The rank that posted it drains here (every rank's ring, or this rank's
  // own in the one-rank form).
  for (auto& drained : m_rings) {
    if (drained.rank == src) drained.consumer.source_read(ticket);
  }
}

Result<void> ProxyLoop::settle_fences() {
  if (!m_unfenced.empty()) {
    // One mark a step, after all of the step's copies, not one a put.
    auto mark = m_hooks.fence();
    if (!mark) return mark.error();
    m_fenced.emplace_back(mark.value(), std::move(m_unfenced));
    m_unfenced.clear();
  }
  if (m_fenced.empty()) return {};
  auto completed = m_hooks.completed();
  if (!completed) return completed.error();
  while (!m_fenced.empty() && m_fenced.front().first <= completed.value()) {
    for (const auto& [src, ticket] : m_fenced.front().second) source_read(src, ticket);
    m_fenced.pop_front();
  }
  return {};
}

void ProxyLoop::check_dropped() {
  for (const auto& [id, posted] : m_posted) {
    (void)id;
    // Either end being dropped keeps the put from landing; the fault names
    // the dropped end, never the survivor waiting behind it.
    const int dst = posted.request.peer;
    const int dead = m_pacing->dropped(posted.src) ? posted.src : dst;
    if (m_pacing->dropped(dead)) {
      set_fault(dead, fmt::format("rank {} dropped: a put of {} bytes from rank {} to rank {} "
                                  "cannot land",
                                  dead, posted.request.bytes, posted.src, dst));
      return;
    }
  }
}

Result<ProxyStep> ProxyLoop::step() {
  ProxyStep stats;
  for (auto& drained : m_rings) drain_rank(drained, stats);
  for (const auto& landed : m_pacing->poll()) {
    if (auto applied = apply(landed); !applied.ok()) {
      set_fault(landed.dst, applied.error().message);
      return applied.error();
    }
    ++stats.landed;
  }
  if (m_hooks.fence) {
    if (auto settled = settle_fences(); !settled.ok()) {
      set_fault(m_rings.size() == 1 ? m_rings.front().rank : -1, settled.error().message);
      return settled.error();
    }
  }
  check_dropped();
  if (!m_fault && m_pacing->fault()) m_fault = m_pacing->fault();
  return stats;
}

}  // namespace epkit::ep::network_leg
