#include "ep/network_leg/slot_proxy.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace epkit::ep::network_leg {

namespace {

// Receive tags have the top bit set; send tags count up from 1 below it.
constexpr std::uint64_t k_receive_tag = 1ull << 63;

std::size_t stream_index(int peer, SlotStream stream) {
  return static_cast<std::size_t>(peer) * 2 + (stream == SlotStream::data ? 0 : 1);
}

}  // namespace

std::size_t SlotProxy::staging_bytes(int world_size, const SlotProxyOptions& options) {
  const std::size_t slots =
      options.send_slots + static_cast<std::size_t>(world_size) * 2 * options.receives_per_peer;
  return slots * options.geometry.slot_bytes;
}

SlotProxy::SlotProxy(int rank, int world_size, SlotProxyOptions options, RequestRing ring,
                     std::vector<LocalWindow> windows, std::uint32_t num_signals,
                     std::span<std::byte> staging, SlotTransport& transport, SlotMemory memory)
    : m_rank(rank),
      m_world(world_size),
      m_options(options),
      m_consumer(ring),
      m_windows(std::move(windows)),
      m_staging(staging),
      m_transport(&transport),
      m_memory(std::move(memory)),
      m_planner(rank, world_size, options.geometry),
      m_receiver(
          rank, world_size, options.geometry,
          [this] {
            std::vector<std::uint64_t> sizes;
            for (const auto& w : m_windows) sizes.push_back(w.bytes);
            return sizes;
          }(),
          num_signals),
      m_outgoing(static_cast<std::size_t>(world_size > 0 ? world_size : 0)),
      m_receive_order(m_outgoing.size() * 2) {
  for (std::uint32_t i = 0; i < options.send_slots; ++i)
    m_free_send.push_back(options.send_slots - 1 - i);
}

std::byte* SlotProxy::send_slot(std::uint32_t index) const {
  return m_staging.data() + static_cast<std::size_t>(index) * m_options.geometry.slot_bytes;
}

Result<void> SlotProxy::fail(int rank, std::string reason) {
  if (!m_fault) m_fault = Fault{rank, reason};
  return make_error(ErrorCode::invalid, std::move(reason));
}

Result<void> SlotProxy::start() {
  if (!m_receives.empty()) return make_error(ErrorCode::invalid, "slot proxy: started twice");
  if (m_world < 2 || m_rank < 0 || m_rank >= m_world || m_options.send_slots == 0 ||
      m_options.receives_per_peer == 0 || m_options.batch == 0) {
    return make_error(
        ErrorCode::invalid,
        fmt::format("slot proxy: rank {} of {}, {} send slots, {} receives per peer, batch {}",
                    m_rank, m_world, m_options.send_slots, m_options.receives_per_peer,
                    m_options.batch));
  }
  if (m_staging.size() < staging_bytes(m_world, m_options)) {
    return make_error(ErrorCode::invalid,
                      fmt::format("slot proxy: {} bytes of staging, {} needed", m_staging.size(),
                                  staging_bytes(m_world, m_options)));
  }
  const std::size_t first = m_options.send_slots;
  for (int peer = 0; peer < m_world; ++peer) {
    if (peer == m_rank) continue;
    for (SlotStream stream : {SlotStream::data, SlotStream::control}) {
      for (std::uint32_t k = 0; k < m_options.receives_per_peer; ++k) {
        const std::size_t index =
            first + stream_index(peer, stream) * m_options.receives_per_peer + k;
        const std::uint64_t tag = k_receive_tag | index;
        Receive r;
        r.peer = peer;
        r.stream = stream;
        r.slot = m_staging.data() + index * m_options.geometry.slot_bytes;
        r.bytes = stream == SlotStream::data ? m_options.geometry.slot_bytes : sizeof(SlotHeader);
        m_receives[tag] = r;
        if (auto posted = post_receive(tag); !posted.ok()) return posted;
      }
    }
  }
  return {};
}

Result<void> SlotProxy::post_receive(std::uint64_t tag) {
  Receive& r = m_receives.at(tag);
  r.done = false;
  m_receive_order[stream_index(r.peer, r.stream)].push_back(tag);
  if (auto posted = m_transport->post_recv(r.peer, r.stream, r.slot, r.bytes, tag); !posted.ok()) {
    return fail(r.peer,
                fmt::format("posting a receive from rank {}: {}", r.peer, posted.error().message));
  }
  return {};
}

Result<SlotProxyStep> SlotProxy::step() {
  SlotProxyStep stats;
  if (m_fault) return make_error(ErrorCode::invalid, m_fault->reason);
  if (auto r = drain(stats); !r.ok()) return r.error();
  if (auto r = send(stats); !r.ok()) return r.error();
  if (auto r = apply(stats); !r.ok()) return r.error();
  return stats;
}

Result<void> SlotProxy::drain(SlotProxyStep& stats) {
  std::optional<Error> bad;
  stats.requests =
      m_consumer.drain_owing(m_options.batch, [&](std::uint64_t ticket, const PutRequest& request) {
        // Until all its slots are staged, a put's source is owed (a producer's
        // flush waits on it); one refused is never read.
        if (bad) {
          m_consumer.source_read(ticket);
          return;
        }
        if (request.bytes > 0) {
          const auto w = request.src_window.value;
          if (w >= m_windows.size() || request.src_offset > m_windows[w].bytes ||
              request.bytes > m_windows[w].bytes - request.src_offset) {
            bad = make_error(
                ErrorCode::invalid,
                fmt::format("rank {} posted a put of {} bytes at offset {} of its window {}, "
                            "outside it",
                            m_rank, request.bytes, request.src_offset, w));
            m_consumer.source_read(ticket);
            return;
          }
        }
        auto slots = m_planner.plan(request);
        if (!slots.ok()) {
          bad = make_error(ErrorCode::invalid, fmt::format("rank {} posted a bad put: {}", m_rank,
                                                           slots.error().message));
          m_consumer.source_read(ticket);
          return;
        }
        m_unstaged[ticket] = slots->size();
        for (auto& slot : *slots)
          m_outgoing[static_cast<std::size_t>(request.peer)].push_back({slot, ticket});
      });
  if (bad) return fail(m_rank, bad->message);
  if (m_consumer.abandoned() > 0) {
    return fail(
        m_rank,
        fmt::format("a kernel of rank {} gave up waiting for room in its request ring", m_rank));
  }
  return {};
}

Result<void> SlotProxy::send(SlotProxyStep& stats) {
  // One slot per peer per pass, so one busy peer does not take every
  // staging slot while the others wait.
  bool progress = true;
  while (progress && !m_free_send.empty()) {
    progress = false;
    for (auto& queue : m_outgoing) {
      if (queue.empty() || m_free_send.empty()) continue;
      Outgoing out = queue.front();
      queue.pop_front();
      const std::uint32_t index = m_free_send.back();
      m_free_send.pop_back();
      std::byte* slot = send_slot(index);
      const int peer = static_cast<int>(&queue - m_outgoing.data());
      if (auto w = m_memory.write_header(slot, out.slot.header); !w.ok()) {
        return fail(m_rank, fmt::format("staging a slot for rank {}: {}", peer, w.error().message));
      }
      if (out.slot.header.payload > 0) {
        const LocalWindow& src = m_windows[out.slot.src_window.value];
        if (auto c = m_memory.copy(slot + sizeof(SlotHeader), src.base + out.slot.src_offset,
                                   out.slot.header.payload);
            !c.ok()) {
          return fail(m_rank,
                      fmt::format("staging a slot for rank {}: {}", peer, c.error().message));
        }
      }
      auto left = m_unstaged.find(out.ticket);
      if (left != m_unstaged.end() && --left->second == 0) {
        m_unstaged.erase(left);
        m_consumer.source_read(out.ticket);
      }
      const std::size_t bytes = out.slot.stream == SlotStream::data
                                    ? sizeof(SlotHeader) + out.slot.header.payload
                                    : sizeof(SlotHeader);
      const std::uint64_t tag = m_next_send_tag++;
      if (auto p = m_transport->post_send(peer, out.slot.stream, slot, bytes, tag); !p.ok()) {
        return fail(peer, fmt::format("sending a slot to rank {}: {}", peer, p.error().message));
      }
      m_sending[tag] = Sending{index, peer};
      ++stats.sent;
      progress = true;
    }
  }
  return {};
}

Result<void> SlotProxy::apply(SlotProxyStep& stats) {
  auto done = m_transport->poll();
  if (!done.ok()) {
    return fail(m_transport->failed_peer(),
                fmt::format("the transport failed: {}", done.error().message));
  }
  for (const auto& c : *done) {
    if (auto s = m_sending.find(c.tag); s != m_sending.end()) {
      if (c.failed)
        return fail(s->second.peer, fmt::format("a send to rank {} failed", s->second.peer));
      m_free_send.push_back(s->second.index);
      m_sending.erase(s);
    } else if (auto r = m_receives.find(c.tag); r != m_receives.end()) {
      if (c.failed)
        return fail(r->second.peer, fmt::format("a receive from rank {} failed", r->second.peer));
      r->second.done = true;
    } else {
      return fail(-1, fmt::format("the transport completed tag {}, never posted", c.tag));
    }
  }
  // Each (peer, stream)'s receives in posting order: the slot the peer sent
  // first is checked first, and a later one waits for it.
  for (auto& order : m_receive_order) {
    while (!order.empty() && m_receives.at(order.front()).done) {
      const std::uint64_t tag = order.front();
      order.pop_front();
      Receive& r = m_receives.at(tag);
      auto header = m_memory.read_header(r.slot);
      if (!header.ok()) {
        return fail(r.peer,
                    fmt::format("reading a slot from rank {}: {}", r.peer, header.error().message));
      }
      // The checks read the header the host holds; the payload stays in
      // slot memory. A header whose payload overruns the receive is refused
      // by the checks (the receive's size is the most that can have landed).
      const std::size_t received = std::min(r.bytes, sizeof(SlotHeader) + header->payload);
      auto action = m_receiver.accept(r.peer, r.stream, *header, received);
      if (!action.ok()) return fail(r.peer, action.error().message);
      if (action->payload > 0) {
        const LocalWindow& dst = m_windows[action->dst_window.value];
        if (auto c = m_memory.copy(dst.base + action->dst_offset, r.slot + sizeof(SlotHeader),
                                   action->payload);
            !c.ok()) {
          return fail(m_rank,
                      fmt::format("applying a slot from rank {}: {}", r.peer, c.error().message));
        }
      }
      if (action->write_signal) {
        if (auto w = m_memory.write_signal(action->signal, action->signal_value); !w.ok()) {
          return fail(m_rank, fmt::format("writing signal {}: {}", action->signal.value,
                                          w.error().message));
        }
      }
      ++stats.applied;
      if (auto posted = post_receive(tag); !posted.ok()) return posted;
    }
  }
  return {};
}

std::size_t SlotProxy::pending_sends() const {
  std::size_t n = m_sending.size();
  for (const auto& q : m_outgoing) n += q.size();
  return n;
}

}  // namespace epkit::ep::network_leg
