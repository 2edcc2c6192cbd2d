// The NCCL proxy backend's host loop, apart from NCCL itself
// (docs/ep-internode.md, "Rebuild", backend 2). One per rank: it drains the
// rank's request ring, cuts each put into fixed-size slots (slot_framing.h),
// stages each slot (header, then the payload copied out of the source
// window) and sends it; it keeps receives of one slot posted to every peer,
// checks each slot that arrives, copies its payload into the window it names
// and then writes the signal. No step waits for a size: every receive is one
// slot, posted ahead.
//
// What moves bytes is injected: SlotTransport (posting sends and receives
// of one slot and reporting their completion: NCCL's grouped send/recv on
// the proxy's stream on a GPU, an in-memory exchange in the CPU tests) and
// SlotMemory (copies between windows and slots, and signal writes:
// cudaMemcpyAsync on the proxy's stream on a GPU, memcpy on the CPU).
#pragma once

#include <epkit/result.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ep/network_leg/leg.h"
#include "ep/network_leg/request_queue.h"
#include "ep/network_leg/slot_framing.h"

namespace epkit::ep::network_leg {

/// A posted send or receive that finished, by the tag it was posted with;
/// `failed`: it cannot finish (its peer is gone), and the proxy names that
/// peer.
struct SlotCompletion {
  std::uint64_t tag = 0;
  bool failed = false;
};

class SlotTransport {
 public:
  virtual ~SlotTransport() = default;
  /// Posts one slot to `peer` on `stream`. Sends to one peer on one stream
  /// arrive in the order they were posted, into that peer's receives in the
  /// order those were posted (NCCL's order between two ranks).
  virtual Result<void> post_send(int peer, SlotStream stream, const std::byte* slot,
                                 std::size_t bytes, std::uint64_t tag) = 0;
  virtual Result<void> post_recv(int peer, SlotStream stream, std::byte* slot, std::size_t bytes,
                                 std::uint64_t tag) = 0;
  /// Sends and receives finished since the last call (any order). An
  /// error: the transport failed (a peer gone, a network error).
  virtual Result<std::vector<SlotCompletion>> poll() = 0;
  /// After poll() failed: the peer it blames, or -1 when it cannot tell.
  virtual int failed_peer() const { return -1; }
};

struct SlotMemory {
  /// Copies `bytes` from `src` to `dst` (window to slot, slot to window),
  /// ordered before every later call.
  std::function<Result<void>(std::byte* dst, const std::byte* src, std::size_t bytes)> copy;
  /// Writes a header into a slot (host to slot memory), ordered likewise.
  std::function<Result<void>(std::byte* slot, const SlotHeader& header)> write_header;
  /// Reads a received slot's header to the host (done when it returns).
  std::function<Result<SlotHeader>(const std::byte* slot)> read_header;
  /// Sets this rank's signal to `value` after the copies before it.
  std::function<Result<void>(SignalId signal, std::uint64_t value)> write_signal;
};

/// Memory this rank registered: window w is `windows[w]`.
struct LocalWindow {
  std::byte* base = nullptr;
  std::uint64_t bytes = 0;
};

struct SlotProxyOptions {
  SlotGeometry geometry;
  /// Send staging slots in all (shared by the peers).
  std::uint32_t send_slots = 8;
  /// Receives kept posted to each peer on each stream.
  std::uint32_t receives_per_peer = 4;
  /// Requests drained from the ring per step.
  std::uint32_t batch = 64;
};

/// What one step did.
struct SlotProxyStep {
  std::size_t requests = 0;  ///< drained from the ring
  std::size_t sent = 0;      ///< slots posted
  std::size_t applied = 0;   ///< received slots copied (and signalled)
};

class SlotProxy {
 public:
  /// `staging` is the proxy's slot memory (send staging slots, then every
  /// peer's receive slots: staging_bytes() of it). Nothing is posted until
  /// start().
  SlotProxy(int rank, int world_size, SlotProxyOptions options, RequestRing ring,
            std::vector<LocalWindow> windows, std::uint32_t num_signals,
            std::span<std::byte> staging, SlotTransport& transport, SlotMemory memory);
  static std::size_t staging_bytes(int world_size, const SlotProxyOptions& options);

  /// Posts every receive (collective in effect: peers' sends wait on them).
  Result<void> start();
  /// Drains, sends, applies what arrived. An error is also the fault().
  Result<SlotProxyStep> step();
  const std::optional<Fault>& fault() const { return m_fault; }
  /// Slots planned or in flight that have not been sent and completed.
  std::size_t pending_sends() const;
  /// Every ticket below it has its source bytes staged (or was refused): the
  /// ring's done word, which a producer's flush waits on (the source may then
  /// be reused). SlotMemory::copy must have read the source when it returns
  /// for this to hold; a GPU implementation that only queues the copy must
  /// wait for it first.
  std::uint64_t staged_ticket() const { return m_consumer.done(); }

 private:
  struct Outgoing {
    PlannedSlot slot;
    std::uint64_t ticket = 0;  // the request it came from
  };
  struct Receive {
    int peer = 0;
    SlotStream stream = SlotStream::data;
    std::byte* slot = nullptr;
    std::size_t bytes = 0;
    bool done = false;
  };
  Result<void> drain(SlotProxyStep& stats);
  Result<void> send(SlotProxyStep& stats);
  Result<void> apply(SlotProxyStep& stats);
  Result<void> post_receive(std::uint64_t tag);
  Result<void> fail(int rank, std::string reason);
  std::byte* send_slot(std::uint32_t index) const;

  int m_rank;
  int m_world;
  SlotProxyOptions m_options;
  RequestConsumer m_consumer;
  std::vector<LocalWindow> m_windows;
  std::span<std::byte> m_staging;
  SlotTransport* m_transport;
  SlotMemory m_memory;
  SlotPlanner m_planner;
  SlotReceiver m_receiver;
  std::vector<std::deque<Outgoing>> m_outgoing;  // by peer, in sequence order
  std::vector<std::uint32_t> m_free_send;        // staging slot indices
  struct Sending {
    std::uint32_t index = 0;  // staging slot
    int peer = 0;
  };
  std::map<std::uint64_t, Sending> m_sending;  // by send tag
  // Receives by tag; per (peer, stream) the tags in posting order, so slots
  // are checked in the order the peer sent them.
  std::map<std::uint64_t, Receive> m_receives;
  std::vector<std::deque<std::uint64_t>> m_receive_order;  // index peer * 2 + stream
  std::uint64_t m_next_send_tag = 1;
  std::map<std::uint64_t, std::size_t> m_unstaged;  // ticket -> its slots not yet staged
  std::optional<Fault> m_fault;
};

}  // namespace epkit::ep::network_leg
