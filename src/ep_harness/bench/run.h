// The GPU half of `epkit bench ep` (the CPU half is bench/ep_bench.h): every
// rank checks the engine against the reference path, then times it. Part of
// the EP harness because it runs the reference path and the test data.
#pragma once

#include <epkit/ep.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/ep_bench.h"
#include "runtime/gpu_rank.h"

namespace epkit::harness {

struct EpBenchOptions {
  bench::EpShape shape;  // ranks is taken from the launch
  std::vector<int> sms{24};
  std::vector<int> chunks{1, 2, 4, 8};
  int warmup = 20;
  int iters = 50;
  std::uint64_t seed = 0;
  /// Non-empty: every rank writes its inputs and outputs under
  /// <dump_dir>/rank<r>/ as .npy files (rank 0 adds README.txt).
  std::string dump_dir;
  double timeout_s = 60;
  /// Written before each timed run to evict the previous run's data from
  /// L2 (DeepEP's bench() zeroes 256 MB).
  std::size_t flush_bytes = std::size_t{256} << 20;
  /// Called on rank 0 after each (op, SM count) has been timed.
  std::function<void(bench::EpOp op, int sms)> progress;
};

/// The Buffer's options for these sizes. A launch of several nodes with
/// fewer ranks on each than in all gets the internode Buffer, its nodes
/// being the launch's (ranks_per_node = the local ranks), as `epkit test ep`
/// makes it.
ep::BufferOptions ep_buffer_options(const runtime::LaunchInfo& launch,
                                    const EpBenchOptions& options);
/// The Buffer for these options over the rank's store (collective).
Result<std::unique_ptr<ep::Buffer>> make_ep_buffer(runtime::GpuRank& rank,
                                                   const EpBenchOptions& options);

/// Runs on every rank: inputs, checks against the reference (every rank
/// learns every rank's verdict), the dump, and unless a check failed the
/// timed sweep. Rank 0's report holds every rank's times and counts. A
/// failed check is not an error: see EpReport::checks_passed. On an
/// internode Buffer the checks compare recv_gbl_rank_prefix_sum (there is
/// no recv_src_idx) and the rows carry DeepEP's (RDMA) figures as well.
Result<bench::EpReport> run_ep_bench(runtime::GpuRank& rank, ep::Buffer& buffer,
                                     const EpBenchOptions& options);

}  // namespace epkit::harness
