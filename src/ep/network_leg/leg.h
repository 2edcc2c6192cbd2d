// The network leg of the rebuilt internode mode: one-sided puts into a
// peer's registered window with a signal increment, waits on signals, and
// flush, issued by the kernels themselves so that the host never waits for
// sizes (docs/ep-internode.md, "Rebuild: a device-driven network leg").
//
// Two halves share this header:
// - the device contract: plain data (window and signal ids, the request a
//   kernel posts, the handle a kernel receives) with no CUDA types, so the
//   proxy and emulated backends, their CPU tests and the kernels agree on
//   one layout;
// - the host backend: window registration, the handle exchange over the
//   Buffer's Bootstrap, a progress hook for backends that move data from the
//   host (the emulated NIC, the NCCL proxy), and faults naming a rank.
// Today's leg (ep/internode/network.h) stays until the kernels move over.
#pragma once

#include <epkit/ep.h>
#include <epkit/result.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace epkit::ep::network_leg {

/// Which transport carries the puts. Every rank must pick the same one.
enum class BackendKind {
  /// Faked nodes on one GPU: CUDA IPC copies paced by EmulatedPacing
  /// (emulated_pacing.h). The test bed.
  emulated_nic,
  /// NCCL's host API; a proxy thread turns requests into fixed-size slot
  /// transfers (any network NCCL runs on).
  nccl_proxy,
  /// NCCL's device API (GIN, NCCL 2.28.7 and later): the kernel's calls map
  /// one to one onto ncclGin put/signal/waitSignal/flush. On paper for now.
  nccl_gin,
};

const char* to_string(BackendKind kind);

/// A registered window, addressed by peers by id and byte offset (never by
/// pointer: the backend maps ids to its own handles).
struct WindowId {
  std::uint32_t value = 0;
  // Written out, not defaulted: nvcc compiles this header as C++17.
  friend constexpr bool operator==(WindowId a, WindowId b) { return a.value == b.value; }
};

/// One 64-bit monotone counter in a rank's signal array. Signals only grow
/// within a Buffer's life, so a wait compares with >= and never misses an
/// increment that landed early.
struct SignalId {
  std::uint32_t value = 0;
  // Written out, not defaulted: nvcc compiles this header as C++17.
  friend constexpr bool operator==(SignalId a, SignalId b) { return a.value == b.value; }
};

/// What a kernel posts for one put (the proxy and emulated backends read it
/// from a host-mapped queue; the GIN backend never builds one). `bytes` 0 is
/// a bare signal: credits and counts travel that way. Plain data with fixed
/// widths, so device and host read the same layout.
struct PutRequest {
  std::int32_t peer = -1;  ///< global rank of the destination
  std::uint32_t channel = 0;
  WindowId dst_window;
  WindowId src_window;
  std::uint64_t dst_offset = 0;
  std::uint64_t src_offset = 0;
  std::uint64_t bytes = 0;
  SignalId signal;               ///< the destination's signal that grows when the bytes have landed
  std::uint64_t signal_add = 0;  ///< 0: no signal
};
static_assert(sizeof(PutRequest) == 56, "PutRequest is shared with device code: keep its layout");

/// A peer's window as a kernel that moves bytes itself addresses it (the
/// emulated NIC on a GPU: a CUDA IPC mapping of the peer's memory).
struct PeerWindow {
  std::uint8_t* base = nullptr;
  std::uint64_t bytes = 0;
};

/// The device side's view of the leg, passed by value to the kernels. The
/// device calls (ep/network_leg/device_calls.h for the queue backends, shared
/// with the host's tests) are:
///   put(peer, dst_window, dst_offset, src_window, src_offset, bytes, signal, add)
///   signal(peer, signal, add)            a put of no bytes
///   wait(signal, value, timeout_ns)      false on expiry; the caller names
///                                        the peer that owed the signal
///   flush()                              this caller's puts have left their
///                                        source (it may be reused)
/// Puts to one peer may complete in any order; a signal orders only its own
/// put's bytes.
struct DeviceLeg {
  BackendKind kind = BackendKind::emulated_nic;
  int rank = 0;
  int world_size = 0;
  /// This rank's signal array (device memory the backend writes into).
  std::uint64_t* signals = nullptr;
  std::uint32_t num_signals = 0;
  /// The request ring of the proxy and emulated backends (host-mapped;
  /// protocol in ep/network_leg/request_queue.h): ticket i goes to
  /// `requests[i % queue_slots]`, claimed by a fetch-add on `*queue_tail`,
  /// published by `queue_ready[i % queue_slots]` = i + 1, drained up to
  /// `*queue_head` by the host. Null for GIN.
  PutRequest* requests = nullptr;
  std::uint64_t* queue_ready = nullptr;
  std::uint32_t queue_slots = 0;
  std::uint64_t* queue_tail = nullptr;
  const std::uint64_t* queue_head = nullptr;
  std::uint64_t* queue_abandoned = nullptr;  ///< producers that timed out
  /// Every ticket below it has had its source bytes read by the host (flush
  /// waits on it; head only says the request left the ring).
  const std::uint64_t* queue_done = nullptr;
  /// Backend-specific device state (the GIN device communicator).
  void* backend_state = nullptr;
  /// Producer-moved puts (the emulated NIC on a GPU, device_moves.cuh): the
  /// host only paces. It stores ticket + 1 into `grants[ticket %
  /// queue_slots]` when the put has crossed the modelled NIC; the posting
  /// warp then copies the bytes over `peer_windows[rank * windows_per_peer +
  /// window]` and adds to `peer_signals[rank][signal]` itself. Null: the host
  /// moves the bytes. Host-mapped, so the host writes them without a CUDA
  /// call: a host thread that issues CUDA calls while kernels wait on it
  /// deadlocks against any cudaMalloc or cudaFree of the application, whose
  /// page-table lock waits for those kernels.
  std::uint64_t* grants = nullptr;
  const PeerWindow* peer_windows = nullptr;
  std::uint32_t windows_per_peer = 0;
  std::uint64_t* const* peer_signals = nullptr;
  /// Host-mapped, written by the backend's host thread: 1 + the rank whose
  /// process exited first (0: none yet). A wait on that rank gives up at
  /// once; a wait on another rank that expires names it, since the rank it
  /// waited for may be alive and stuck behind it. Null: nobody watches
  /// processes.
  const std::uint64_t* exited = nullptr;
};

/// A peer the leg gave up on, by global rank, and why. Every survivor
/// reports the rank that died, not the one stuck behind it.
struct Fault {
  int rank = -1;
  std::string reason;
};

/// The host half of a backend. Collective calls (exchange) must be made by
/// every rank of the Bootstrap in the same order.
class HostBackend {
 public:
  virtual ~HostBackend() = default;
  virtual BackendKind kind() const = 0;
  /// Registers [base, base + bytes) of device memory as a window peers may
  /// put into (and read from, as a put's source). Before exchange() only.
  virtual Result<WindowId> register_window(void* base, std::size_t bytes) = 0;
  /// Trades every rank's window handles over the bootstrap (collective);
  /// afterwards device_leg() is valid.
  virtual Result<void> exchange(Bootstrap& bootstrap) = 0;
  virtual DeviceLeg device_leg() const = 0;
  /// Moves posted requests forward (copies, sends, signal writes); backends
  /// that need no host (GIN) return at once. The Buffer's proxy thread calls
  /// it in a loop, never the caller's thread, so no operation waits on it.
  virtual Result<void> progress() = 0;
  /// Whether the last progress() moved anything: a proxy thread backs off
  /// while it does not (an idle NIC must not spin a core per rank).
  virtual bool moved_last_step() const { return true; }
  /// The first fault seen (a dropped peer, a transport error, a count message
  /// that failed its checks), or none while healthy.
  virtual std::optional<Fault> fault() const = 0;
  /// A rank whose process exited, where the backend watches processes
  /// (DeviceLeg::exited). Not a fault by itself: at a job's end ranks leave
  /// at their own pace; a wait that expires names it rather than a live rank
  /// that may be stuck behind it.
  virtual std::optional<int> exited_rank() const { return std::nullopt; }
  /// exited_rank() after looking at the peers' processes now, not only as
  /// the progress loop last did: for an error path naming its cause.
  virtual std::optional<int> exited_rank_now() { return exited_rank(); }
  /// Ends every pending transfer so kernels waiting on them can time out and
  /// return; the backend cannot be used afterwards.
  virtual void abort() = 0;
  /// "emulated NIC, 50 GB/s, 2 us", "NCCL 2.28.9 proxy, 16 KiB slots".
  virtual std::string describe() const = 0;
};

}  // namespace epkit::ep::network_leg
