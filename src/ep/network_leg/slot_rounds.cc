#include "ep/network_leg/slot_rounds.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>

namespace epkit::ep::network_leg {

namespace {

// More credits than this in one block is not a peer that works.
constexpr std::uint32_t k_max_credits = 1u << 20;

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

RoundTransport::RoundTransport(int rank, int world_size, SlotGeometry geometry,
                               std::uint32_t max_data_slots, RoundExchange& control,
                               RoundExchange& data, SlotMemory memory,
                               std::int64_t round_timeout_ns,
                               std::function<std::int64_t()> clock_ns)
    : m_rank(rank),
      m_world(world_size),
      m_geometry(geometry),
      m_max_data(max_data_slots),
      m_control(&control),
      m_data(&data),
      m_memory(std::move(memory)),
      m_peers(static_cast<std::size_t>(world_size > 0 ? world_size : 0)),
      m_timeout_ns(round_timeout_ns),
      m_clock(clock_ns ? std::move(clock_ns) : std::function<std::int64_t()>(steady_ns)) {}

Result<void> RoundTransport::fail(int peer, std::string reason) {
  if (!m_failed) {
    m_failed = true;
    m_failed_peer = peer;
    m_failure = reason;
  }
  return make_error(ErrorCode::invalid, std::move(reason));
}

Result<void> RoundTransport::post_send(int peer, SlotStream stream, const std::byte* slot,
                                       std::size_t bytes, std::uint64_t tag) {
  if (!is_peer(peer) || slot == nullptr) {
    return make_error(ErrorCode::invalid,
                      fmt::format("a send to rank {}, not a peer of rank {}", peer, m_rank));
  }
  // Data slots travel whole (the receive is a whole slot); a control slot
  // is its header.
  const std::size_t most = stream == SlotStream::data ? m_geometry.slot_bytes : sizeof(SlotHeader);
  if (bytes < sizeof(SlotHeader) || bytes > most) {
    return make_error(ErrorCode::invalid,
                      fmt::format("a slot of {} bytes (at most {})", bytes, most));
  }
  auto& queue =
      stream == SlotStream::data ? peer_state(peer).data_out : peer_state(peer).control_out;
  queue.push_back(Op{slot, nullptr, tag});
  return {};
}

Result<void> RoundTransport::post_recv(int peer, SlotStream stream, std::byte* slot,
                                       std::size_t bytes, std::uint64_t tag) {
  if (!is_peer(peer) || slot == nullptr) {
    return make_error(ErrorCode::invalid,
                      fmt::format("a receive from rank {}, not a peer of rank {}", peer, m_rank));
  }
  Peer& p = peer_state(peer);
  if (stream == SlotStream::data) {
    if (bytes != m_geometry.slot_bytes) {
      return make_error(
          ErrorCode::invalid,
          fmt::format("a data receive of {} bytes, not a slot ({})", bytes, m_geometry.slot_bytes));
    }
    p.data_in.push_back(Op{nullptr, slot, tag});
    ++p.data_unadvertised;
  } else {
    if (bytes < sizeof(SlotHeader)) {
      return make_error(ErrorCode::invalid, fmt::format("a control receive of {} bytes", bytes));
    }
    p.control_in.push_back(Op{nullptr, slot, tag});
    ++p.control_unadvertised;
  }
  return {};
}

Result<void> RoundTransport::post_control() {
  ++m_round;
  std::vector<RoundPart> parts;
  for (int peer = 0; peer < m_world; ++peer) {
    if (peer == m_rank) continue;
    Peer& p = peer_state(peer);
    ControlBlock& out = p.out;
    out = ControlBlock{};
    out.sender = static_cast<std::uint32_t>(m_rank);
    out.round = m_round;
    out.data_credits = std::exchange(p.data_unadvertised, 0);
    out.control_credits = std::exchange(p.control_unadvertised, 0);
    p.data_promised += out.data_credits;
    p.control_promised += out.control_credits;
    const auto data = static_cast<std::uint32_t>(
        std::min<std::size_t>({p.data_out.size(), p.data_credit, m_max_data}));
    for (std::uint32_t i = 0; i < data; ++i) {
      p.sending_data.push_back(p.data_out.front());
      p.data_out.pop_front();
    }
    p.data_credit -= data;
    out.data_slots = data;
    const auto control = static_cast<std::uint32_t>(std::min<std::size_t>(
        {p.control_out.size(), p.control_credit, ControlBlock::k_inline_control}));
    for (std::uint32_t i = 0; i < control; ++i) {
      const Op op = p.control_out.front();
      p.control_out.pop_front();
      auto header = m_memory.read_header(op.send);
      if (!header.ok())
        return fail(m_rank, fmt::format("reading a control slot: {}", header.error().message));
      out.control[i] = *header;
      p.sending_control.push_back(op);
    }
    p.control_credit -= control;
    out.control_count = control;
    parts.push_back(RoundPart{peer, reinterpret_cast<const std::byte*>(&out), sizeof(ControlBlock),
                              reinterpret_cast<std::byte*>(&p.in), sizeof(ControlBlock)});
  }
  if (auto posted = m_control->post(parts); !posted.ok()) {
    return fail(m_control->failed_peer(),
                fmt::format("posting control round {}: {}", m_round, posted.error().message));
  }
  m_phase = Phase::control;
  m_phase_started = m_clock();
  return {};
}

Result<void> RoundTransport::finish_control(std::vector<SlotCompletion>& done) {
  std::vector<RoundPart> parts;
  for (int peer = 0; peer < m_world; ++peer) {
    if (peer == m_rank) continue;
    Peer& p = peer_state(peer);
    const ControlBlock& in = p.in;
    auto bad = [&](const std::string& what) {
      return fail(peer, fmt::format("rank {} sent rank {} a bad control block in round {}: {}",
                                    peer, m_rank, m_round, what));
    };
    if (in.magic != ControlBlock::k_magic || in.sender != static_cast<std::uint32_t>(peer)) {
      return bad(fmt::format("magic {:#x}, sender {}", in.magic, in.sender));
    }
    if (in.round != m_round) return bad(fmt::format("it is for round {}", in.round));
    // Credits outstanding are receives the peer holds posted: never more than
    // k_max_credits (a peer claiming more is broken; a sum must not wrap).
    if (in.data_credits > k_max_credits - p.data_credit ||
        in.control_credits > k_max_credits - p.control_credit) {
      return bad(fmt::format("{} and {} credits on top of {} and {} outstanding (at most {})",
                             in.data_credits, in.control_credits, p.data_credit, p.control_credit,
                             k_max_credits));
    }
    // The peer may fill only receives it knew of: those advertised before
    // this round (this round's credits cross its block on the way).
    const std::uint32_t known_data = p.data_promised - p.out.data_credits;
    const std::uint32_t known_control = p.control_promised - p.out.control_credits;
    if (in.data_slots > known_data || in.data_slots > m_max_data) {
      return bad(fmt::format("{} data slots, {} receives advertised for them (at most {} a round)",
                             in.data_slots, known_data, m_max_data));
    }
    if (in.control_count > ControlBlock::k_inline_control || in.control_count > known_control) {
      return bad(fmt::format("{} control slots, {} receives advertised for them", in.control_count,
                             known_control));
    }
    p.data_credit += in.data_credits;
    p.control_credit += in.control_credits;
    // Inline control slots fill the peer's control receives in order.
    for (std::uint32_t i = 0; i < in.control_count; ++i) {
      const Op op = p.control_in.front();
      p.control_in.pop_front();
      if (auto w = m_memory.write_header(op.recv, in.control[i]); !w.ok()) {
        return fail(m_rank, fmt::format("writing a control slot: {}", w.error().message));
      }
      done.push_back({op.tag, false});
    }
    p.control_promised -= in.control_count;
    for (const Op& op : p.sending_control) done.push_back({op.tag, false});
    p.sending_control.clear();
    // The data phase: our announced slots out, theirs into our receives.
    for (const Op& op : p.sending_data) {
      parts.push_back(RoundPart{peer, op.send, m_geometry.slot_bytes, nullptr, 0});
      m_data_done.push_back({op.tag, false});
    }
    p.sending_data.clear();
    for (std::uint32_t i = 0; i < in.data_slots; ++i) {
      const Op op = p.data_in.front();
      p.data_in.pop_front();
      parts.push_back(RoundPart{peer, nullptr, 0, op.recv, m_geometry.slot_bytes});
      m_data_done.push_back({op.tag, false});
    }
    p.data_promised -= in.data_slots;
  }
  if (parts.empty()) {
    m_phase = Phase::idle;
    return {};
  }
  if (auto posted = m_data->post(parts); !posted.ok()) {
    return fail(m_data->failed_peer(),
                fmt::format("posting data round {}: {}", m_round, posted.error().message));
  }
  m_phase = Phase::data;
  m_phase_started = m_clock();
  return {};
}

Result<std::vector<SlotCompletion>> RoundTransport::poll() {
  if (m_failed) return make_error(ErrorCode::invalid, m_failure);
  std::vector<SlotCompletion> done;
  // A few phases a call: a round that finished at once moves straight on.
  for (int step = 0; step < 4; ++step) {
    if (m_phase == Phase::idle) {
      if (auto r = post_control(); !r.ok()) return r.error();
      continue;
    }
    RoundExchange* exchange = m_phase == Phase::control ? m_control : m_data;
    auto finished = exchange->done();
    if (!finished.ok()) {
      return fail(exchange->failed_peer(),
                  fmt::format("round {} ({} phase): {}", m_round,
                              m_phase == Phase::control ? "control" : "data",
                              finished.error().message))
          .error();
    }
    if (!*finished) {
      if (m_clock() - m_phase_started > m_timeout_ns) {
        return fail(exchange->failed_peer(),
                    fmt::format("round {} ({} phase) did not finish within {} s: a peer of rank {} "
                                "stopped taking part",
                                m_round, m_phase == Phase::control ? "control" : "data",
                                static_cast<double>(m_timeout_ns) / 1e9, m_rank))
            .error();
      }
      break;
    }
    if (m_phase == Phase::control) {
      if (auto r = finish_control(done); !r.ok()) return r.error();
    } else {
      done.insert(done.end(), m_data_done.begin(), m_data_done.end());
      m_data_done.clear();
      m_phase = Phase::idle;
    }
  }
  return done;
}

}  // namespace epkit::ep::network_leg
