// The GPU half of `epkit bench ep --mode low-latency` (the CPU half is
// bench/ep_bench_low_latency.h): every rank checks the low-latency dispatch and
// combine against its own inputs and every other rank's, then times them.
#pragma once

#include <epkit/ep.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "bench/ep_bench_low_latency.h"
#include "runtime/gpu_rank.h"

namespace epkit::harness {

struct EpLowLatencyBenchOptions {
  bench::EpLowLatencyShape shape;  // ranks is taken from the launch
  int sms = 24;
  int warmup = 20;
  int iters = 50;
  std::uint64_t seed = 0;
  double timeout_s = 60;
  /// Across nodes (the launch's nodes): the emulated NIC's leg, else NCCL's.
  bool emulated_nic = false;
  double nic_gbps = 50;
  double nic_latency_us = 2;
  /// Written before each timed iteration to evict the previous one's data
  /// from L2, as DeepEP's bench() does.
  std::size_t flush_bytes = std::size_t{256} << 20;
};

/// One rank's inputs, made on the host from (seed, rank) alone, so that
/// every rank can rebuild every other rank's routing and rows for its
/// checks without moving them: x BF16 [tokens, hidden] (bits), top-k
/// distinct experts per token with a few -1 entries (as DeepEP's test),
/// positive weights.
struct EpLowLatencyInputs {
  std::vector<std::uint16_t> x;
  std::vector<std::int64_t> topk_idx;
  std::vector<float> topk_weights;
};
EpLowLatencyInputs make_ep_low_latency_inputs(const bench::EpLowLatencyShape& shape,
                                              std::uint64_t seed, int rank);

/// The Buffer: the low-latency region Buffer::low_latency_size_hint asks
/// for and the smallest normal heap these sizes allow (collective).
Result<std::unique_ptr<ep::Buffer>> make_ep_low_latency_buffer(
    runtime::GpuRank& rank, const EpLowLatencyBenchOptions& options);

/// Runs on every rank: the checks (every rank learns every verdict), then,
/// unless one failed, the timing of FP8 and BF16 dispatch with combine,
/// without and with the hook. Rank 0's report holds every rank's runs.
Result<bench::EpLowLatencyReport> run_ep_low_latency_bench(runtime::GpuRank& rank,
                                                           ep::Buffer& buffer,
                                                           const EpLowLatencyBenchOptions& options);

}  // namespace epkit::harness
