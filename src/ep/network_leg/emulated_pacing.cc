#include "ep/network_leg/emulated_pacing.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

namespace epkit::ep::network_leg {

std::int64_t SteadyClock::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void SteadyClock::sleep_until(std::int64_t t_ns) {
  const auto wait = t_ns - now_ns();
  if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
}

Result<EmulatedPacing> EmulatedPacing::create(int num_ranks, const PacingConfig& config,
                                              Clock& clock) {
  if (num_ranks < 1) {
    return make_error(ErrorCode::invalid,
                      fmt::format("emulated NIC: {} ranks (at least 1)", num_ranks));
  }
  if (!(config.bytes_per_s > 0) || !std::isfinite(config.bytes_per_s)) {
    return make_error(ErrorCode::invalid,
                      fmt::format("emulated NIC: bandwidth cap {} bytes/s (positive and finite)",
                                  config.bytes_per_s));
  }
  if (config.latency_ns < 0 || config.reorder_jitter_ns < 0) {
    return make_error(ErrorCode::invalid,
                      fmt::format("emulated NIC: latency {} ns and jitter {} ns (not negative)",
                                  config.latency_ns, config.reorder_jitter_ns));
  }
  return EmulatedPacing(num_ranks, config, clock);
}

EmulatedPacing::EmulatedPacing(int num_ranks, const PacingConfig& config, Clock& clock)
    : m_config(config),
      m_clock(&clock),
      m_nics(static_cast<std::size_t>(num_ranks)),
      m_dropped(static_cast<std::size_t>(num_ranks), false),
      m_random(config.seed) {
  // Every bucket starts full: an idle NIC may send a burst at once.
  for (auto& nic : m_nics) {
    nic.tokens = static_cast<double>(m_config.burst_bytes);
    nic.time_ns = clock.now_ns();
  }
}

void EmulatedPacing::note_gap(Nic& nic, std::int64_t now_ns) {
  constexpr std::int64_t k_shortest_ns = 10000;
  constexpr std::size_t k_most = 65536;
  if (now_ns - nic.time_ns > k_shortest_ns && nic.gaps.size() < k_most)
    nic.gaps.emplace_back(nic.time_ns, now_ns);
}

EmulatedPacing::Idle EmulatedPacing::take_idle(int rank) {
  Idle idle;
  if (!valid_rank(rank)) return idle;
  auto& nic = m_nics[static_cast<std::size_t>(rank)];
  refill(nic, m_clock->now_ns());
  idle.lost_ns = static_cast<std::int64_t>(nic.lost_bytes / m_config.bytes_per_s * 1e9);
  idle.gaps.swap(nic.gaps);
  nic.lost_bytes = 0;
  return idle;
}

void EmulatedPacing::refill(Nic& nic, std::int64_t now_ns) const {
  if (now_ns <= nic.time_ns) return;
  const double earned = static_cast<double>(now_ns - nic.time_ns) * m_config.bytes_per_s * 1e-9;
  const auto burst = static_cast<double>(m_config.burst_bytes);
  nic.lost_bytes += std::max(0.0, nic.tokens + earned - burst);
  nic.tokens = std::min(burst, nic.tokens + earned);
  nic.time_ns = now_ns;
}

Result<std::uint64_t> EmulatedPacing::post(int src, int dst, std::uint64_t bytes, SignalId signal,
                                           std::uint64_t signal_add) {
  if (!valid_rank(src) || !valid_rank(dst)) {
    return make_error(
        ErrorCode::invalid,
        fmt::format("emulated NIC: put from rank {} to rank {} of {}", src, dst, m_nics.size()));
  }
  const auto now = m_clock->now_ns();
  auto& nic = m_nics[static_cast<std::size_t>(src)];
  note_gap(nic, now);
  refill(nic, now);
  // The put leaves when the bucket holds its bytes; puts queue behind each
  // other in posting order (the bucket's time only moves forward).
  const auto size = static_cast<double>(bytes);
  if (nic.tokens >= size) {
    nic.tokens -= size;
  } else {
    const double missing = size - nic.tokens;
    nic.time_ns += static_cast<std::int64_t>(std::ceil(missing / m_config.bytes_per_s * 1e9));
    nic.tokens = 0;
  }
  std::int64_t lands = nic.time_ns + m_config.latency_ns;
  if (m_config.reorder_jitter_ns > 0) {
    std::uniform_int_distribution<std::int64_t> jitter(0, m_config.reorder_jitter_ns);
    lands += jitter(m_random);
  }
  m_in_flight.push_back(Completion{m_next_id++, src, dst, bytes, signal, signal_add, now, lands});
  return m_in_flight.back().id;
}

std::vector<Completion> EmulatedPacing::poll() {
  const auto now = m_clock->now_ns();
  std::vector<Completion> done;
  std::erase_if(m_in_flight, [&](const Completion& c) {
    if (c.complete_ns > now || dropped(c.src) || dropped(c.dst)) return false;
    done.push_back(c);
    return true;
  });
  std::sort(done.begin(), done.end(), [](const Completion& a, const Completion& b) {
    return a.complete_ns != b.complete_ns ? a.complete_ns < b.complete_ns : a.id < b.id;
  });
  for (const auto& c : done) {
    if (c.signal_add != 0) m_signals[{c.dst, c.signal.value}] += c.signal_add;
  }
  return done;
}

std::optional<std::int64_t> EmulatedPacing::next_completion_ns() const {
  std::optional<std::int64_t> next;
  for (const auto& c : m_in_flight) {
    if (dropped(c.src) || dropped(c.dst)) continue;
    if (!next || c.complete_ns < *next) next = c.complete_ns;
  }
  return next;
}

std::uint64_t EmulatedPacing::signal(int rank, SignalId signal) const {
  const auto it = m_signals.find({rank, signal.value});
  return it == m_signals.end() ? 0 : it->second;
}

Result<void> EmulatedPacing::wait_signal(int rank, SignalId signal, std::uint64_t value, int from,
                                         std::int64_t timeout_ns) {
  const auto deadline = m_clock->now_ns() + timeout_ns;
  for (;;) {
    poll();
    const auto seen = this->signal(rank, signal);
    if (seen >= value) return {};
    const auto now = m_clock->now_ns();
    if (now >= deadline) {
      auto reason = fmt::format(
          "rank {} waited {:.3f} s for signal {} to reach {} (it is at {}); rank {} did not "
          "deliver{}",
          rank, static_cast<double>(timeout_ns) * 1e-9, signal.value, value, seen, from,
          valid_rank(from) && dropped(from) ? " (dropped)" : "");
      if (!m_fault) m_fault = Fault{from, reason};
      return make_error(ErrorCode::timeout, std::move(reason));
    }
    const auto next = next_completion_ns();
    m_clock->sleep_until(next ? std::min(*next, deadline) : deadline);
  }
}

void EmulatedPacing::drop_rank(int rank) {
  if (valid_rank(rank)) m_dropped[static_cast<std::size_t>(rank)] = true;
}

bool EmulatedPacing::dropped(int rank) const {
  return valid_rank(rank) && m_dropped[static_cast<std::size_t>(rank)];
}

Result<void> EmulatedPacing::set_bytes_per_s(double bytes_per_s) {
  if (!(bytes_per_s > 0) || !std::isfinite(bytes_per_s)) {
    return make_error(
        ErrorCode::invalid,
        fmt::format("emulated NIC: bandwidth cap {} bytes/s (positive and finite)", bytes_per_s));
  }
  const auto now = m_clock->now_ns();
  for (auto& nic : m_nics) refill(nic, now);
  m_config.bytes_per_s = bytes_per_s;
  return {};
}

void EmulatedPacing::stall(int rank, std::int64_t duration_ns) {
  if (!valid_rank(rank) || duration_ns <= 0) return;
  const auto now = m_clock->now_ns();
  auto& nic = m_nics[static_cast<std::size_t>(rank)];
  // Tokens earned up to now stay; none are earned while stalled.
  refill(nic, now);
  nic.time_ns = std::max(nic.time_ns, now) + duration_ns;
  for (auto& c : m_in_flight) {
    if (c.src == rank && c.complete_ns > now) c.complete_ns += duration_ns;
  }
}

}  // namespace epkit::ep::network_leg
