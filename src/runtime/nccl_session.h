// An NCCL communicator whose every wait has a deadline.
//
// NCCL's blocking calls wait forever on a peer that never arrives (its own
// default timeout is 30 minutes). A session initialises the communicator in
// non-blocking mode (ncclConfig_t.blocking = 0) and bounds every wait, init
// and each collective alike, by polling cudaStreamQuery and
// ncclCommGetAsyncError. Each rank marks milestones in the rendezvous store,
// so that a timeout names the ranks (host:rank) that never reached the step,
// and a rank whose store connection dropped (killed, crashed) is named as
// lost. On failure the communicator is aborted, never destroyed in place.
#pragma once

#include <epkit/result.h>

#ifdef EPKIT_WITH_CUDA
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "base/cuda_error.h"
#include "host/dl/nccl.h"
#include "runtime/deadline.h"
#include "runtime/store.h"

namespace epkit::runtime {

struct NcclSessionOptions {
  int rank = 0;
  int world_size = 1;
  int device = 0;
  /// "host:rank" of every rank, by rank (from the exchanged facts); used in
  /// every error that names a rank.
  std::vector<std::string> labels;
  /// How often a wait checks the store for lost ranks.
  Millis store_poll{200};
};

class NcclSession {
 public:
  /// Rendezvous (rank 0 makes the ncclUniqueId and publishes it under
  /// "nccl/unique_id") and non-blocking init, bounded by the deadline.
  static Result<std::unique_ptr<NcclSession>> open(const host::dl::NcclLibrary& nccl, Store& store,
                                                   const NcclSessionOptions& options,
                                                   Deadline deadline);
  ~NcclSession();
  NcclSession(const NcclSession&) = delete;
  NcclSession& operator=(const NcclSession&) = delete;

  const host::dl::NcclApi& api() const { return m_nccl.api; }
  ncclComm_t comm() const { return m_comm; }
  cudaStream_t stream() const { return m_stream; }
  int rank() const { return m_options.rank; }
  int world_size() const { return m_options.world_size; }
  const std::string& label(int rank) const;

  /// An enqueue call's result: ncclSuccess and ncclInProgress are fine, any
  /// other is an nccl error naming `what` and NCCL's last error text.
  Result<void> check(ncclResult_t rc, const std::string& what);

  /// Marks this rank as having reached `milestone`, then waits until the
  /// work queued on the stream completes. On timeout the error says which
  /// ranks never reached the milestone or did not complete it; a lost rank
  /// (its store connection dropped) is an unavailable error naming it.
  Result<void> wait(const std::string& milestone, Deadline deadline);

  /// Waits until the last enqueue call has been taken by the communicator
  /// (a non-blocking communicator answers ncclInProgress until then and
  /// refuses the next call). Needed between back-to-back enqueues.
  Result<void> ready(Deadline deadline);

  /// A blocking communicator over the same ranks (ncclCommSplit of this
  /// one), for timed loops: a non-blocking communicator hands each launch to
  /// NCCL's background thread, which costs tens of microseconds per call and
  /// left the GPU idle between back-to-back operations (16 MiB all-to-all
  /// took 180 us instead of 66 on 4 x H200). Created once; the waits above
  /// still bound what runs on the stream. close() and abort() end it too.
  Result<ncclComm_t> blocking_comm(Deadline deadline);

  /// Finalises and destroys the communicator, bounded by the deadline (it
  /// aborts instead when that fails). Idempotent.
  Result<void> close(Deadline deadline);
  /// ncclCommAbort: after any failure, before the process exits.
  void abort();

 private:
  NcclSession(const host::dl::NcclLibrary& nccl, Store& store, NcclSessionOptions options)
      : m_nccl(nccl), m_store(store), m_options(std::move(options)) {}
  Result<void> mark(const std::string& milestone, const char* phase, Deadline deadline);
  /// Polls `done` until true, the async error is set, the store reports a
  /// lost rank, or the deadline passes; names the stragglers on timeout.
  template <typename Done>
  Result<void> poll(const std::string& milestone, Deadline deadline, Done done);
  std::string stragglers(const std::string& milestone, Deadline deadline);

  const host::dl::NcclLibrary& m_nccl;
  Store& m_store;
  NcclSessionOptions m_options;
  ncclComm_t m_comm = nullptr;
  ncclComm_t m_blocking = nullptr;
  cudaStream_t m_stream = nullptr;
};

}  // namespace epkit::runtime

#endif
