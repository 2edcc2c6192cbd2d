// One rank of `epkit bench ep`, from its start to its end: the rank joins the
// job (runtime/rank_session.h), makes the Buffer of its mode, runs the checks
// and the timed sweep (run.h, low_latency_run.h), watches the NICs of a run
// across nodes (ep_harness/node_nics.h), frees the Buffer and closes. Rank 0
// hands its report to the command, which prints it.
#pragma once

#include <epkit/result.h>

#ifdef EPKIT_WITH_CUDA

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/ep_bench.h"
#include "bench/ep_bench_low_latency.h"
#include "host/host.h"
#include "runtime/launch.h"
#include "runtime/rank_session.h"

namespace epkit::harness {

enum class EpBenchMode { normal, low_latency };

/// What `bench ep`'s flags ask for, once the command has checked them.
struct EpBenchRankOptions {
  /// normal: DeepEP's test_intranode.py (test_internode.py across nodes);
  /// low_latency: its test_low_latency.py.
  EpBenchMode mode = EpBenchMode::normal;
  int tokens = 4096;
  int hidden = 7168;
  int topk = 8;
  int experts = 256;
  /// SM counts to sweep; the low-latency mode takes one, the kernels' blocks.
  std::vector<int> sms{24};
  std::vector<int> chunks{1, 2, 4, 8};  // normal mode: NVL chunks to sweep
  int warmup = 20;
  int iters = 50;
  std::uint64_t seed = 0;
  std::string dump_dir;  // normal mode: an absolute folder for the .npy files, or empty
  double timeout_s = 60;
  /// Low-latency mode across nodes: the network leg (the NCCL host leg
  /// cannot carry it: the Buffer refuses by name) and the emulated NIC.
  bool emulated_nic = false;
  double nic_gbps = 50;
  double nic_latency_us = 2;
  /// Normal mode, on rank 0: after each (op, SM count) has been timed, with
  /// the seconds since the rank joined the job.
  std::function<void(bench::EpOp op, int sms, double seconds)> progress;
};

/// Rank 0's report for the command to print: the mode's report (one of the
/// two is set) and the checks' verdict (k_gpu_ok or k_gpu_wrong_data), which
/// the JSON carries.
struct EpBenchSummary {
  const bench::EpReport* normal = nullptr;
  const bench::EpLowLatencyReport* low_latency = nullptr;
  int code = runtime::k_gpu_ok;
};
using EpBenchSummaryFn = std::function<void(const EpBenchSummary& summary)>;

/// Runs this rank of the bench and returns its exit code (runtime::GpuExit):
/// lines (every rank's failed checks, the NIC map and check) through `io`;
/// on rank 0, `write_summary` once every rank's Buffer is freed and before
/// the rank leaves the job, so that the summary is out before any rank ends.
int run_ep_bench_rank(const host::Host& host, const runtime::LaunchInfo& launch,
                      runtime::RankIo& io, const EpBenchRankOptions& options,
                      const EpBenchSummaryFn& write_summary);

}  // namespace epkit::harness

#endif
