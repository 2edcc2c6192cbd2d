// The GPU half of `epkit bench nccl`: one measured row per size on a joined
// rank. Each collective is a table entry of callbacks (collectives.cc); the
// loop, timing and data check are shared here.
#pragma once

#include <epkit/result.h>

#ifdef EPKIT_WITH_CUDA

#include <functional>
#include <string>
#include <vector>

#include "bench/kernels/data_check.h"
#include "bench/sweep.h"
#include "runtime/nccl_session.h"

namespace epkit::bench {

/// What one collective contributes; `count` is the table's element count
/// (the whole buffer, as nccl-tests prints it).
struct CollectiveOps {
  Collective kind;
  std::size_t (*send_count)(std::size_t count, int nranks);
  std::size_t (*recv_count)(std::size_t count, int nranks);
  /// Elements from the start of the receive buffer where the in-place input
  /// sits (all_gather) or, negated, from the send buffer to the in-place
  /// output (reduce_scatter); 0 when both are the same buffer.
  std::ptrdiff_t (*in_place_offset)(std::size_t count, int me, int nranks);
  /// Enqueues the operation (grouped where it takes several calls).
  ncclResult_t (*run)(const host::dl::NcclApi& api, const void* send, void* recv,
                      std::size_t count, ncclDataType_t type, int root, int me, int nranks,
                      ncclComm_t comm, cudaStream_t stream);
  /// What this rank's receive buffer must hold.
  kernels::CheckSpec (*expect)(std::size_t count, int me, int nranks, int root);
};

const CollectiveOps& collective_ops(Collective c);

struct RunOptions {
  Collective kind = Collective::all_reduce;
  DataType type;
  std::vector<std::size_t> sizes;  // bytes
  int iters = 20;
  int warmup = 5;
  bool check = true;
  int root = 0;
  double timeout_s = 60;
  /// Called after each size with its index (rank 0 prints progress).
  std::function<void(std::size_t done, std::size_t total)> progress;
};

/// Runs the sweep on every rank; returns the rows with this rank's time
/// averaged over ranks and the wrong counts summed (rank 0 holds the
/// complete rows; the others get their own).
Result<std::vector<Row>> run_sweep(runtime::NcclSession& session, runtime::Store& store,
                                   const RunOptions& options);

}  // namespace epkit::bench

#endif
