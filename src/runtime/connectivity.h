// The GPU work of `epkit test`: on a joined rank with NCCL started, a
// checked all-reduce, a ring send/recv with a checked payload and a barrier,
// each bounded by the timeout; and the capture of NCCL's INFO log that says
// which transport NCCL chose per peer. The command only prints what these
// return.
#pragma once

#include <epkit/result.h>

#include <cstddef>
#include <string>

#include "host/host.h"
#include "runtime/nccl_transports.h"

#ifdef EPKIT_WITH_CUDA
#include "runtime/gpu_rank.h"
#endif

namespace epkit::runtime {

/// Points NCCL's INFO log at a private file so the transports can be read
/// back; returns its path, or "" when the user set NCCL_DEBUG (their log,
/// their choice) or no file could be made. Call before NCCL loads: it reads
/// NCCL_DEBUG* once.
std::string capture_nccl_log(const host::Host& host, int rank);

/// The transports in the log capture_nccl_log made (read at most
/// k_max_nccl_log_bytes of it), which is removed. Empty for "".
PeerTransports read_nccl_transports(const std::string& log_path);
constexpr std::size_t k_max_nccl_log_bytes = 64u << 20;

#ifdef EPKIT_WITH_CUDA

/// Elements of each buffer: 4 MiB per buffer, big enough to use every
/// channel.
constexpr std::size_t k_connectivity_count = 1 << 20;

struct ConnectivityResult {
  /// false when a collective delivered wrong values (reason says which).
  bool ok = true;
  std::string reason;
  std::size_t wrong_allreduce = 0;
  std::size_t wrong_ring = 0;
};

/// The collectives of `epkit test`, then a barrier in the store. An error is
/// NCCL, CUDA, a lost peer or the timeout; wrong data is a result.
Result<ConnectivityResult> run_connectivity(GpuRank& rank, double timeout_s);

#endif

}  // namespace epkit::runtime
