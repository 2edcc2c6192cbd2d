// The emulated NIC's host backend (docs/ep-internode.md, "Rebuild",
// backend 1): faked nodes on one GPU, one rank a process, each rank's NIC a
// host thread of that process. Its progress() drains the rank's own request
// ring (request_queue.h) into a pacing model of its NIC (emulated_pacing.h)
// and applies each landed put to the peer's window and signal array through
// a MemoryMapper, by ProxyLoop (proxy_loop.h).
//
// How one rank reaches another's memory is injected (MemoryMapper): ranks as
// threads of one process (InProcessMapper below, the CPU tests) or processes
// on one GPU (CudaIpcMapper, cuda_ipc_mapper.h). exchange() all-gathers one
// fixed-format, versioned descriptor a rank (its windows and its signal
// array, as the mapper exports them) and checks every peer's as hostile
// input: a bad one is refused naming the peer.
//
// Signals are written with absolute values that count the puts this rank's
// proxy applied, so each signal must have one source rank: the protocol's
// rings give every tail, credit and count signal one writer.
#pragma once

#include <epkit/ep.h>
#include <epkit/result.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ep/network_leg/emulated_pacing.h"
#include "ep/network_leg/leg.h"
#include "ep/network_leg/process_watch.h"
#include "ep/network_leg/proxy_loop.h"
#include "ep/network_leg/request_queue.h"

namespace epkit::ep::network_leg {

/// How one rank's backend allocates what peers reach, hands it out, maps
/// what peers handed out, and writes into it.
class MemoryMapper {
 public:
  enum class Placement {
    device,       ///< the signal array: the GPU's memory (host memory in-process)
    host_mapped,  ///< the request ring: host memory the kernels also address
  };

  virtual ~MemoryMapper() = default;
  /// "in-process", "CUDA IPC".
  virtual std::string describe() const = 0;
  /// The size of every handle export() returns: descriptors carry it, and a
  /// peer's handle of another size is refused.
  virtual std::size_t handle_bytes() const = 0;
  /// Zeroed memory the mapper owns until it is destroyed; on a GPU, host and
  /// device address it by the same pointer.
  virtual Result<void*> allocate(std::size_t bytes, Placement placement) = 0;
  /// An opaque handle by which peers map [base, base + bytes).
  virtual Result<std::string> export_memory(void* base, std::size_t bytes) = 0;
  /// Maps `handle`, exported by `rank`, of a range of `bytes`; valid until
  /// the mapper is destroyed.
  virtual Result<void*> import_memory(int rank, std::string_view handle, std::size_t bytes) = 0;
  /// Moves `bytes` from `src` (this rank's) to `dst` (possibly a peer's).
  /// Writes issued by one mapper land in issue order.
  virtual Result<void> copy(void* dst, const void* src, std::size_t bytes) = 0;
  /// Stores `value` into the signal at `dst` after every earlier copy.
  virtual Result<void> write_u64(std::uint64_t* dst, std::uint64_t value) = 0;
  /// Marks every copy issued so far; returns the mark (marks grow from 1).
  /// A mapper whose copies are done when copy() returns needs nothing more
  /// (the defaults); one that only queues them (a copy engine) completes a
  /// mark once those copies have read their sources.
  virtual Result<std::uint64_t> fence() { return ++m_marks; }
  /// The highest mark whose copies have all finished.
  virtual Result<std::uint64_t> completed() { return m_marks; }

 private:
  std::uint64_t m_marks = 0;
};

/// Ranks as threads of one process: a handle is the pointer's value, copies
/// are memcpy, a signal is a release store (its waiter loads with acquire,
/// so the bytes copied before it are visible).
class InProcessMapper final : public MemoryMapper {
 public:
  std::string describe() const override { return "in-process"; }
  std::size_t handle_bytes() const override { return sizeof(std::uint64_t); }
  Result<void*> allocate(std::size_t bytes, Placement placement) override;
  Result<std::string> export_memory(void* base, std::size_t bytes) override;
  Result<void*> import_memory(int rank, std::string_view handle, std::size_t bytes) override;
  Result<void> copy(void* dst, const void* src, std::size_t bytes) override;
  Result<void> write_u64(std::uint64_t* dst, std::uint64_t value) override;

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::vector<std::unique_ptr<void, Free>> m_allocations;
};

struct EmulatedNicOptions {
  /// The NIC: cap in bytes/s, burst, latency, reordering (a jitter of 0 is
  /// off; otherwise each put lands up to that much later, seeded).
  PacingConfig pacing;
  std::uint32_t ring_slots = 1024;   ///< the request ring's slots
  std::uint32_t num_signals = 1024;  ///< this rank's signal array
  /// How long a host producer waits for room in the ring, and how long a
  /// claimed ticket may stay unpublished before it is a fault of this rank.
  double timeout_s = 100;
  std::uint32_t batch = 64;  ///< requests drained per progress step at most
  /// The producers move the bytes (device_moves.cuh): the host paces and
  /// grants, and makes no CUDA call after exchange(). What a GPU needs (see
  /// DeviceLeg::grants for why); the host-copy form serves the CPU tests'
  /// host producers.
  bool producer_moves = false;

  /// Each field in range, or an error naming the first that is not.
  Result<void> validate() const;
};

/// The fixed, versioned descriptor a rank all-gathers in exchange(): what a
/// peer needs to reach its windows and signals. Carried as hex text (a
/// Bootstrap carries strings). Little-endian binary, version 2:
///   u32 magic "EPNL", u16 version, u16 handle_bytes, i32 rank, i32 world,
///   u32 backend kind, u32 num_signals, u32 num_windows, u32 pid (0:
///   unknown), u64 pid namespace (ProcessId: how peers watch this rank's
///   process), the signal array's handle, then for each window: u64 bytes,
///   handle.
struct RankDescriptor {
  static constexpr std::uint32_t kMagic = 0x4c4e5045;  // "EPNL"
  static constexpr std::uint16_t kVersion = 2;
  static constexpr std::uint32_t kMaxWindows = 64;
  static constexpr std::uint32_t kMaxSignals = 1u << 24;
  static constexpr std::uint64_t kMaxWindowBytes = std::uint64_t{1} << 40;
  static constexpr std::size_t kHeaderBytes = 40;
  static constexpr std::uint32_t kMaxPid = 1u << 22;  // Linux's PID_MAX_LIMIT

  struct Window {
    std::uint64_t bytes = 0;
    std::string handle;
  };
  int rank = 0;
  int world = 0;
  std::uint32_t num_signals = 0;
  ProcessId process;
  std::string signals_handle;
  std::vector<Window> windows;

  /// Every handle must have `handle_bytes` bytes.
  std::string encode() const;
  /// Checks `text` as hostile input from `rank` of `world`: its form, size
  /// and version, its rank and world, every count in range; errors name it.
  static Result<RankDescriptor> decode(std::string_view text, int rank, int world,
                                       std::size_t handle_bytes);
};

class EmulatedBackend final : public HostBackend {
 public:
  /// `clock` paces the NIC (a test's ManualClock); null: the steady clock.
  /// It must outlive the backend.
  static Result<std::unique_ptr<EmulatedBackend>> create(const EmulatedNicOptions& options,
                                                         std::unique_ptr<MemoryMapper> mapper,
                                                         Clock* clock = nullptr);
  ~EmulatedBackend() override;

  BackendKind kind() const override { return BackendKind::emulated_nic; }
  /// Refused after exchange(), for a null base, zero bytes, a range that
  /// overlaps a registered window, or more than RankDescriptor::kMaxWindows.
  Result<WindowId> register_window(void* base, std::size_t bytes) override;
  Result<void> exchange(Bootstrap& bootstrap) override;
  DeviceLeg device_leg() const override;
  Result<void> progress() override;
  bool moved_last_step() const override { return m_moved.load(std::memory_order_relaxed); }
  std::optional<Fault> fault() const override;
  std::optional<int> exited_rank() const override;
  std::optional<int> exited_rank_now() override;
  void abort() override;
  std::string describe() const override;

  /// The host producer (tests, host-side posts): posts to this rank's ring,
  /// waiting at most the options' timeout for room.
  PostStatus post(const PutRequest& request);
  /// Puts this rank posted that have not landed.
  std::size_t in_flight() const;

  /// Fault injection, passed to the pacing model (after exchange): from now
  /// on nothing from or to `rank` lands; or `rank`'s NIC sends nothing for
  /// `duration_ns`. Every rank's backend must be told of a drop to model a
  /// rank the network lost.
  Result<void> drop_rank(int rank);
  Result<void> stall(int rank, std::int64_t duration_ns);
  /// This rank's NIC's cap from now on (EmulatedPacing::set_bytes_per_s);
  /// every rank's backend must be told for the world to change speed.
  Result<void> set_bytes_per_s(double bytes_per_s);
  /// How this rank's NIC went unused since the last call
  /// (EmulatedPacing::take_idle).
  Result<EmulatedPacing::Idle> take_idle();

 private:
  struct Window {
    std::uint8_t* base = nullptr;
    std::uint64_t bytes = 0;
    std::string handle;
  };
  struct Peer {
    std::uint64_t* signals = nullptr;
    std::uint32_t num_signals = 0;
    std::vector<Window> windows;
  };

  EmulatedBackend(const EmulatedNicOptions& options, std::unique_ptr<MemoryMapper> mapper,
                  Clock* clock);
  Result<void> init();
  Result<void> import_peers(const std::vector<std::string>& descriptors);
  Result<void> check_request(const PutRequest& request) const;
  ProxyHooks hooks();
  void watch_producers(const ProxyStep& step);
  /// A rank whose process exited: the word the kernels' waits read
  /// (DeviceLeg::exited) and exited_rank(), so that a wait on it ends at
  /// once and every wait that expires names it rather than a live rank
  /// stuck behind it.
  void watch_processes();
  std::atomic<bool> m_moved{true};  // the last step drained or landed something
  void set_fault(int rank, std::string reason);

  EmulatedNicOptions m_options;
  std::unique_ptr<MemoryMapper> m_mapper;
  std::unique_ptr<Clock> m_own_clock;
  Clock* m_clock;

  std::uint64_t* m_signals = nullptr;
  std::string m_signals_handle;
  RequestRing m_ring;
  std::vector<Window> m_windows;

  int m_rank = -1;
  int m_world = 0;
  bool m_exchanged = false;
  std::vector<Peer> m_peers;           // by global rank, this one included
  std::vector<ProcessId> m_processes;  // by global rank, from the descriptors
  ProcessWatch m_watch;
  std::uint64_t* m_exited = nullptr;  // host-mapped: DeviceLeg::exited
  std::int64_t m_watched_processes_ns = 0;
  // Producer-moved puts: the grants, and every rank's windows and signals
  // as the kernels address them (host-mapped, written at exchange()).
  std::uint64_t* m_grants = nullptr;
  PeerWindow* m_peer_windows = nullptr;
  std::uint64_t** m_peer_signals = nullptr;
  std::uint32_t m_windows_per_peer = 0;
  Result<void> publish_peer_tables();
  std::optional<EmulatedPacing> m_pacing;
  std::optional<ProxyLoop> m_proxy;

  // progress() runs on the proxy thread; fault(), abort() and fault
  // injection come from others.
  mutable std::mutex m_mutex;
  std::atomic<bool> m_aborted{false};
  std::optional<Fault> m_fault;
  std::uint64_t m_watched_head = 0;  // pending tickets' first, when last seen moving
  // The last put copied, for an error a later call reports.
  std::optional<PutRequest> m_last_put;
  std::string describe_last_put() const;
  std::int64_t m_watched_since_ns = 0;
};

}  // namespace epkit::ep::network_leg
