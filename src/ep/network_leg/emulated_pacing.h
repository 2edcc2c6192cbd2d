// When each put of the emulated NIC completes: the timing half of the
// emulated network leg (docs/ep-internode.md, "Rebuild", backend 1), apart
// from the CUDA IPC copies that carry the bytes, so it is tested on the CPU
// with a clock the test moves.
//
// Every rank has one NIC. A put leaves its source NIC through a token bucket
// (a bandwidth cap in bytes/s with a burst allowance), lands a fixed latency
// later, and may be held back by a random extra delay (seeded) so that puts
// overtake each other: the protocol above must rely only on each put's own
// signal. Faults: a dropped rank (puts from it and to it never complete, and
// a wait for its signal expires naming it) and a stall (a NIC sends nothing
// for a while; what was in flight lands that much later).
#pragma once

#include <epkit/result.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "ep/network_leg/leg.h"

namespace epkit::ep::network_leg {

/// Time for the pacing model, injected so that tests control it.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::int64_t now_ns() const = 0;
  /// Returns at `t_ns` or later.
  virtual void sleep_until(std::int64_t t_ns) = 0;
};

/// std::chrono::steady_clock, for the emulated NIC's host threads.
class SteadyClock final : public Clock {
 public:
  std::int64_t now_ns() const override;
  void sleep_until(std::int64_t t_ns) override;
};

/// A clock that moves only when told (or when a wait sleeps), for tests.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(std::int64_t start_ns = 0) : m_now(start_ns) {}
  std::int64_t now_ns() const override { return m_now; }
  void sleep_until(std::int64_t t_ns) override {
    if (t_ns > m_now) m_now = t_ns;
  }
  void advance(std::int64_t ns) { m_now += ns; }

 private:
  std::int64_t m_now;
};

struct PacingConfig {
  double bytes_per_s = 50e9;          ///< each NIC's cap (400 Gb/s)
  std::size_t burst_bytes = 1 << 20;  ///< what an idle NIC may send at once
  std::int64_t latency_ns = 2000;     ///< from leaving the source to landing
  /// 0: puts from one NIC complete in the order posted. Otherwise each put
  /// lands up to this much later, drawn from a generator seeded with `seed`.
  std::int64_t reorder_jitter_ns = 0;
  std::uint64_t seed = 1;
};

/// One put that landed.
struct Completion {
  std::uint64_t id = 0;
  int src = 0;
  int dst = 0;
  std::uint64_t bytes = 0;
  SignalId signal;
  std::uint64_t signal_add = 0;
  std::int64_t posted_ns = 0;
  std::int64_t complete_ns = 0;
};

class EmulatedPacing {
 public:
  /// Invalid when `num_ranks` < 1 or the config has a cap, latency or jitter
  /// out of range.
  static Result<EmulatedPacing> create(int num_ranks, const PacingConfig& config, Clock& clock);

  /// Posts a put of `bytes` from `src` to `dst` now; the destination's
  /// `signal` grows by `signal_add` when it lands. Returns the put's id.
  Result<std::uint64_t> post(int src, int dst, std::uint64_t bytes, SignalId signal = {},
                             std::uint64_t signal_add = 0);
  /// The puts that have landed by now, in landing order (ties by id), their
  /// signals applied; each is returned once.
  std::vector<Completion> poll();
  /// When the next in-flight put lands, if any will (a dropped rank's never do).
  std::optional<std::int64_t> next_completion_ns() const;
  std::size_t in_flight() const { return m_in_flight.size(); }

  /// `rank`'s signal as the puts that landed so far left it.
  std::uint64_t signal(int rank, SignalId signal) const;
  /// Polls (sleeping on the clock between landings) until `rank`'s `signal`
  /// reaches `value`, at most `timeout_ns`. On expiry: a timeout error naming
  /// `from`, the rank that owes the signal, and fault() is set.
  Result<void> wait_signal(int rank, SignalId signal, std::uint64_t value, int from,
                           std::int64_t timeout_ns);

  /// From now on nothing from or to `rank` lands (in flight included).
  void drop_rank(int rank);
  bool dropped(int rank) const;
  /// `rank`'s NIC sends nothing for `duration_ns` from now; its puts in flight
  /// land that much later.
  void stall(int rank, std::int64_t duration_ns);
  /// Every NIC's cap from now on (bytes/s, positive and finite): tokens
  /// earned so far stay, puts already paced keep their times. A test runs
  /// calls at two caps in one process so that the two figures it compares
  /// come from the same ranks (docs/performance.md).
  Result<void> set_bytes_per_s(double bytes_per_s);
  /// The first wait that expired, naming the rank it gave up on.
  const std::optional<Fault>& fault() const { return m_fault; }

  /// How `rank`'s NIC went unused since the last call (then reset): the
  /// capacity lost while its bucket was full, as time at the cap, and the
  /// stretches longer than 10 us in which nothing was queued (from, to).
  struct Idle {
    std::int64_t lost_ns = 0;
    std::vector<std::pair<std::int64_t, std::int64_t>> gaps;
  };
  Idle take_idle(int rank);

 private:
  struct Nic {
    double tokens = 0;         // bytes the bucket holds at `time_ns`
    std::int64_t time_ns = 0;  // the bucket's own time: when the last put left
    double lost_bytes = 0;     // earned while the bucket was full
    std::vector<std::pair<std::int64_t, std::int64_t>> gaps;  // bounded
  };

  EmulatedPacing(int num_ranks, const PacingConfig& config, Clock& clock);
  void refill(Nic& nic, std::int64_t now_ns) const;
  static void note_gap(Nic& nic, std::int64_t now_ns);
  bool valid_rank(int rank) const { return rank >= 0 && rank < static_cast<int>(m_nics.size()); }

  PacingConfig m_config;
  Clock* m_clock;
  std::vector<Nic> m_nics;
  std::vector<bool> m_dropped;
  std::vector<Completion> m_in_flight;
  std::map<std::pair<int, std::uint32_t>, std::uint64_t> m_signals;
  std::mt19937_64 m_random;
  std::uint64_t m_next_id = 1;
  std::optional<Fault> m_fault;
};

}  // namespace epkit::ep::network_leg
