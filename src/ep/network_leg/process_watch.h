// Which ranks' processes have exited, for the emulated NIC. Every rank of an
// emulated job runs on one host (CUDA IPC), so a rank can watch its peers'
// processes the way a job's failure detector would: a peer that exited is
// dead, one that is silent but alive is stuck (perhaps behind the dead one),
// and only the dead one should be named. Linux pidfds: a pidfd polls
// readable once its process has terminated (zombies included), and it is
// taken while the peer is known to be alive, so a reused pid cannot fool it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace epkit::ep::network_leg {

/// A process as a peer can find it: its pid in its pid namespace, and that
/// namespace's identity (0: unknown, then nobody watches it).
struct ProcessId {
  std::uint32_t pid = 0;
  std::uint64_t pid_namespace = 0;
};

class ProcessWatch {
 public:
  /// This process.
  static ProcessId self();

  ProcessWatch() = default;
  /// Watches every rank of `ranks` (by index) but `self` whose process is in
  /// this process's pid namespace. A peer that cannot be watched (another
  /// namespace, pidfds unsupported) is left to the timeouts; one already
  /// gone when the watch starts counts as exited.
  ProcessWatch(const std::vector<ProcessId>& ranks, int self);
  ~ProcessWatch();
  ProcessWatch(ProcessWatch&& other) noexcept;
  ProcessWatch& operator=(ProcessWatch&& other) noexcept;
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

  /// The lowest rank whose process has exited, once one has (then always
  /// that one); never blocks.
  std::optional<int> exited();
  /// How many peers are watched.
  int watched() const;

 private:
  void close_all();
  std::vector<int> m_fds;  // by rank; -1: not watched
  std::optional<int> m_exited;
};

}  // namespace epkit::ep::network_leg
