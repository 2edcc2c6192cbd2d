// The host proxy of the emulated backend: one step drains request rings
// (request_queue.h) into the pacing model (emulated_pacing.h) and applies
// the puts that have landed by now, bytes first, then the signal. How bytes
// and signals reach memory is injected (ProxyHooks): the CPU tests copy
// between host buffers, the GPU backend issues cudaMemcpyAsync over CUDA IPC
// mappings.
//
// One loop may drain every rank's ring (all ranks in one place: the tests of
// this loop) or one rank's own (the emulated backend, emulated_backend.h:
// one proxy per rank process, the rank's NIC).
#pragma once

#include <epkit/result.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ep/network_leg/emulated_pacing.h"
#include "ep/network_leg/leg.h"
#include "ep/network_leg/request_queue.h"

namespace epkit::ep::network_leg {

struct ProxyHooks {
  /// Optional: checks a request as it leaves its ring, before it is paced
  /// (windows, offsets and signal in range). An error is a fault of the
  /// rank that posted it, and the put is dropped.
  std::function<Result<void>(int src, const PutRequest& request)> check;
  /// Copies `request.bytes` from rank `src`'s `src_window` at `src_offset`
  /// into rank `request.peer`'s `dst_window` at `dst_offset`. Without
  /// `fence`, the source must have been read when it returns: the put's
  /// ticket then counts as done and the producer's flush lets it overwrite
  /// the source.
  std::function<Result<void>(int src, const PutRequest& request)> copy;
  /// Optional, for copies that are only queued when `copy` returns (a GPU
  /// copy engine): `fence` marks every copy issued so far and returns the
  /// mark (marks grow), `completed` returns the highest mark whose copies
  /// have all finished. A put's ticket then counts as done only once its
  /// mark has completed.
  std::function<Result<std::uint64_t>()> fence;
  std::function<Result<std::uint64_t>()> completed;
  /// Sets rank `dst`'s `signal` to `value`. Absolute, not an increment:
  /// signals only grow, so a value written twice or late does no harm. The
  /// value counts the puts this loop applied, so every signal must have one
  /// source rank whose ring only this loop drains (the protocol's rings give
  /// each tail and credit signal one writer).
  std::function<Result<void>(int dst, SignalId signal, std::uint64_t value)> write_signal;
  /// Optional, for producers that move their own bytes (device_moves.cuh):
  /// called instead of copy and write_signal when the put (or bare signal)
  /// `ticket` of rank `src` has crossed the NIC; it grants the producer,
  /// which then copies and signals itself. The ticket then counts as read.
  std::function<Result<void>(int src, std::uint64_t ticket, const PutRequest& request)> land;
};

/// What one step moved.
struct ProxyStep {
  std::size_t posted = 0;  ///< requests drained from the rings into the pacing model
  std::size_t landed = 0;  ///< puts whose bytes and signal were applied
};

class ProxyLoop {
 public:
  /// `rings[r]` is rank r's request ring; `pacing` models as many ranks.
  /// At most `batch` requests leave one ring a step, so one busy rank does
  /// not starve the others.
  ProxyLoop(const std::vector<RequestRing>& rings, EmulatedPacing& pacing, ProxyHooks hooks,
            std::size_t batch = 64);
  /// Drains only `rank`'s ring, in a world of `world_size` ranks (`pacing`
  /// models as many): the proxy of one rank process.
  ProxyLoop(int rank, int world_size, const RequestRing& ring, EmulatedPacing& pacing,
            ProxyHooks hooks, std::size_t batch = 64);

  /// Drains, then applies what has landed. An error: a hook failed (the
  /// fault names the rank whose memory it was writing).
  Result<ProxyStep> step();
  /// The first fault: a put that cannot land because a rank was dropped
  /// (names the dropped rank, whichever end it is), a request naming a
  /// rank outside the world, a producer that timed out on its ring, a
  /// pacing wait that expired, or a failed hook.
  const std::optional<Fault>& fault() const { return m_fault; }
  /// Puts posted to the pacing model that have not landed.
  std::size_t in_flight() const { return m_posted.size(); }
  /// Tickets claimed on the drained rings but not drained yet (a producer
  /// may still be writing the first of them).
  std::uint64_t pending() const;

 private:
  // A ring this loop drains and the rank that posts to it.
  struct Drained {
    int rank = 0;
    RequestConsumer consumer;
  };

  void drain_rank(Drained& drained, ProxyStep& stats);
  Result<void> apply(const Completion& landed);
  Result<void> settle_fences();
  void source_read(int src, std::uint64_t ticket);
  void check_dropped();
  void set_fault(int rank, std::string reason);

  std::vector<Drained> m_rings;
  int m_world = 0;
  EmulatedPacing* m_pacing;
  ProxyHooks m_hooks;
  std::size_t m_batch;
  struct Posted {
    int src = 0;
    std::uint64_t ticket = 0;  // in rank src's ring, reported read once copied
    PutRequest request;
  };
  std::unordered_map<std::uint64_t, Posted> m_posted;  // by pacing id, until it lands
  // Puts copied with a fence hook: (rank, ticket) copied this step, not yet
  // under a mark; then, by mark, those whose copy may still be reading.
  std::vector<std::pair<int, std::uint64_t>> m_unfenced;
  std::deque<std::pair<std::uint64_t, std::vector<std::pair<int, std::uint64_t>>>> m_fenced;
  // Each destination's signals as the puts applied so far leave them (the
  // pacing model's own counts run ahead: they include puts polled but not
  // yet applied).
  std::map<std::pair<int, std::uint32_t>, std::uint64_t> m_signals;
  std::optional<Fault> m_fault;
};

}  // namespace epkit::ep::network_leg
