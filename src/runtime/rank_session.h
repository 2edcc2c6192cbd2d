// One rank's session of a GPU command (`epkit test`, `bench nccl`, `test ep`,
// `bench ep`): where the rank writes, the start and the end every rank
// shares, and the exit codes a Slurm prolog or a Kubernetes job can act on.
// The command's launch flags and node agent are the CLI's (cli/gpu_launch.h);
// what a rank does between open and close is its layer's (runtime for the
// connectivity test and NCCL's bench, the EP harness for the engine's).
#pragma once

#include <epkit/result.h>

#include <ostream>
#include <string>

#include "runtime/launch.h"

#ifdef EPKIT_WITH_CUDA
#include <memory>

#include "host/host.h"
#include "runtime/gpu_rank.h"
#endif

namespace epkit::runtime {

/// Exit codes of the GPU commands (docs/runtime.md, "Exit codes").
enum GpuExit : int {
  k_gpu_ok = 0,
  k_gpu_wrong_data = 10,   // a collective delivered wrong values
  k_gpu_nccl_error = 11,   // NCCL or CUDA reported an error
  k_gpu_unavailable = 12,  // no GPU, no driver, no libnccl, or a build without CUDA
  k_gpu_below_busbw = 13,  // bench: average bus bandwidth under --min-busbw
  k_gpu_usage = 64,        // the flags ask for what the launch cannot run (EX_USAGE)
  k_gpu_peer_lost = 75,    // another rank died or left (k_exit_peer_lost)
  k_gpu_timeout = 124,     // a step did not finish within --timeout
};

/// Where one rank writes: `out` for its lines (with "[host:rank] " when no
/// epkit agent adds it), `summary` for rank 0's report (the agent prints it
/// unprefixed after every rank finished). The command gives the streams.
struct RankIo {
  std::ostream& out;
  std::ostream& summary;
  std::string prefix;
  /// The last line written (a failure's reason for --json).
  mutable std::string last_line{};
  void line(const std::string& text) const;
};

/// The exit code for a runtime error: timeout, peer lost, unavailable, NCCL.
int exit_code_for(const Error& error);

#ifdef EPKIT_WITH_CUDA
/// The start every GPU rank shares: device and libnccl present, store joined,
/// facts exchanged (rank 0 prints the mismatches), NCCL started. Returns 0
/// with `out` set, or prints "FAIL: ..." and returns the exit code.
int open_gpu_rank(const host::Host& host, const LaunchInfo& launch, RankIo& io, double timeout_s,
                  std::unique_ptr<GpuRank>& out);
/// The end they share: a store barrier (rank 0's summary is out before
/// anyone leaves), the communicator closed, the store left. Returns `code`,
/// or the failure's exit code after printing it.
int close_gpu_rank(GpuRank& rank, RankIo& io, const std::string& barrier, double timeout_s,
                   int code);
#endif

}  // namespace epkit::runtime
