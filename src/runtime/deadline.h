// Deadline: every blocking call of the runtime takes one, so that no step of a
// multi-node job can wait longer than the user allowed (a broken network shows
// up as a named error, not as a hang).
#pragma once

#include <chrono>
#include <cstdint>

namespace epkit::runtime {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

class Deadline {
 public:
  explicit Deadline(Clock::time_point at) : m_at(at) {}
  static Deadline after(Millis duration) { return Deadline(Clock::now() + duration); }
  static Deadline after_seconds(double seconds) {
    return after(Millis(static_cast<std::int64_t>(seconds * 1000.0)));
  }

  Clock::time_point at() const { return m_at; }
  bool expired() const { return Clock::now() >= m_at; }
  /// Time left, never negative.
  Millis remaining() const {
    auto left = std::chrono::duration_cast<Millis>(m_at - Clock::now());
    return left.count() > 0 ? left : Millis(0);
  }
  /// remaining() as a poll() timeout, rounded up so a call does not return
  /// one millisecond before its deadline and spin.
  int poll_ms() const {
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(m_at - Clock::now());
    if (left.count() <= 0) return 0;
    auto ms = (left.count() + 999) / 1000;
    return ms > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(ms);
  }
  /// The earlier of the two.
  Deadline min(Deadline other) const { return other.m_at < m_at ? other : *this; }

 private:
  Clock::time_point m_at;
};

}  // namespace epkit::runtime
