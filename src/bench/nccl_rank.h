// One rank of `epkit bench nccl`, from its start to its end: the sizes of the
// sweep for this launch, the rank joined (runtime/rank_session.h), the sweep
// (nccl_runner.h), rank 0's verdict (wrong data, --min-busbw), the end. Rank
// 0 hands the rows to the command, which prints nccl-tests' table or JSON.
#pragma once

#include <epkit/result.h>

#ifdef EPKIT_WITH_CUDA

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "bench/sweep.h"
#include "host/host.h"
#include "runtime/gpu_rank.h"
#include "runtime/launch.h"
#include "runtime/rank_session.h"

namespace epkit::bench {

/// What `bench nccl`'s flags ask for, once the command has parsed them.
struct NcclBenchRankOptions {
  Collective kind = Collective::all_reduce;
  DataType type;
  std::size_t min_bytes = 0;
  std::size_t max_bytes = 0;
  std::size_t factor = 2;
  int iters = 20;
  int warmup = 5;
  bool check = true;
  int root = 0;
  /// Rank 0 exits k_gpu_below_busbw when the average bus bandwidth (GB/s)
  /// is under this.
  std::optional<double> min_busbw;
  double timeout_s = 60;
  /// On rank 0, after each size: how many are done, of how many, and the
  /// seconds since the rank joined.
  std::function<void(std::size_t done, std::size_t total, double seconds)> progress;
};

/// Rank 0's rows for the command to print, with the job they ran on and
/// the verdict (k_gpu_ok, k_gpu_wrong_data or k_gpu_below_busbw).
struct NcclBenchSummary {
  const runtime::GpuRank& rank;
  const std::vector<Row>& rows;
  double avg_busbw = 0;
  std::uint64_t wrong = 0;
  int code = runtime::k_gpu_ok;
};

/// Runs this rank of the bench and returns its exit code (runtime::GpuExit);
/// on rank 0 `write_summary` before the rank leaves the job.
int run_nccl_bench_rank(const host::Host& host, const runtime::LaunchInfo& launch,
                        runtime::RankIo& io, const NcclBenchRankOptions& options,
                        const std::function<void(const NcclBenchSummary&)>& write_summary);

}  // namespace epkit::bench

#endif
