// Deadline: every blocking call of the runtime takes one, so that no step of a
// multi-node job can wait longer than the user allowed (a broken network shows
// up as a named error, not as a hang).
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>

namespace epkit::runtime {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

class Deadline {
 public:
  explicit Deadline(Clock::time_point at) : m_at(at) {}
  /// Saturates: a duration past what the clock can hold is "never" (the
  /// clock's end), not an overflow that wraps into the past.
  static Deadline after(Millis duration) {
    auto now = Clock::now();
    if (duration.count() <= 0) return Deadline(now);
    auto room = std::chrono::duration_cast<Millis>(Clock::time_point::max() - now);
    if (duration >= room) return Deadline(Clock::time_point::max());
    return Deadline(now + std::chrono::duration_cast<Clock::duration>(duration));
  }
  /// NaN and negative seconds are "now"; +inf and huge values saturate.
  static Deadline after_seconds(double seconds) {
    if (!(seconds > 0)) return after(Millis(0));
    constexpr double k_max_ms = 9.0e15;  // far beyond any clock's range in ms, within int64
    double ms = seconds * 1000.0;
    return after(Millis(static_cast<std::int64_t>(ms < k_max_ms ? ms : k_max_ms)));
  }

  Clock::time_point at() const { return m_at; }
  bool expired() const { return Clock::now() >= m_at; }
  /// Time left, never negative.
  Millis remaining() const {
    auto now = Clock::now();
    if (m_at <= now) return Millis(0);
    return std::chrono::duration_cast<Millis>(m_at - now);
  }
  /// remaining() as a poll() timeout, rounded up so a call does not return
  /// one millisecond before its deadline and spin.
  int poll_ms() const {
    auto now = Clock::now();
    if (m_at <= now) return 0;
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(m_at - now);
    auto ms = (left.count() + 999) / 1000;
    return ms > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(ms);
  }
  /// The earlier of the two.
  Deadline min(Deadline other) const { return other.m_at < m_at ? other : *this; }

 private:
  Clock::time_point m_at;
};

/// "12.3 s": how the store's server and client write a wait in messages.
inline std::string seconds_text(Millis ms) {
  return fmt::format("{:.1f} s", static_cast<double>(ms.count()) / 1000.0);
}

}  // namespace epkit::runtime
