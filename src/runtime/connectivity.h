// The GPU work of `epkit test`: on a joined rank with NCCL started, a
// checked all-reduce, a ring send/recv with a checked payload and a barrier,
// each bounded by the timeout; the capture of NCCL's INFO log that says
// which transport NCCL chose per peer; and one rank's whole run, from its
// start to its end (run_connectivity_rank). The command only prints what
// these return.
#pragma once

#include <epkit/result.h>

#include <cstddef>
#include <string>

#include "host/host.h"
#include "runtime/nccl_transports.h"

#ifdef EPKIT_WITH_CUDA
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "runtime/facts.h"
#include "runtime/gpu_rank.h"
#include "runtime/launch.h"
#include "runtime/rank_session.h"
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

/// What rank 0 hands the command to print: the job (launch, every rank's
/// facts and label, this rank's GPU), every rank's result as checked by
/// checked_connectivity_result (connectivity_result.h), the facts that differ
/// between ranks, and whether NCCL's log was captured (else the transports
/// are unknown).
struct ConnectivitySummary {
  const GpuRank& rank;
  std::vector<nlohmann::json> results;
  std::vector<Mismatch> mismatches;
  bool transports_known = false;
};

/// One rank of `epkit test`: NCCL's log captured, the rank joined
/// (rank_session.h), run_connectivity, every rank's result shared through
/// the store, on rank 0 `write_summary`, the end every rank waits for; then
/// "OK" or the reason as the rank's last line. Returns the exit code
/// (GpuExit). EPKIT_TEST_KILL_RANK=<rank> makes that rank die once NCCL
/// started: the tests' lost peer, which the others must name.
int run_connectivity_rank(const host::Host& host, const LaunchInfo& launch, RankIo& io,
                          double timeout_s,
                          const std::function<void(const ConnectivitySummary&)>& write_summary);

#endif

}  // namespace epkit::runtime
