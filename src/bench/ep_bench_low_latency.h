// `epkit bench ep --mode low-latency`: DeepEP's test_low_latency.py timing
// for the engine's low-latency mode (decode-sized batches, expert-major
// outputs, a receive hook). Every rank checks the data first, then times
// dispatch and combine with and without the hook; rank 0 prints DeepEP's
// lines for every rank, a table and the JSON.
//
// This header is the CPU half (byte accounting, statistics, lines, table,
// JSON), tested without a GPU; the runner is in
// ep_harness/bench/low_latency_run.h.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/ep_bench.h"

namespace epkit::bench {

/// DeepEP's default low-latency sizes (test_low_latency.py's arguments).
struct EpLowLatencyShape {
  int tokens = 128;  // num_max_dispatch_tokens_per_rank; every rank sends this many
  int hidden = 7168;
  int topk = 8;
  int experts = 288;
  int ranks = 1;
};

/// Bytes one selected (token, expert) pair moves, as DeepEP counts them: the
/// FP8 dispatch sends hidden bytes, a 4-byte scale per 128 channels and 16
/// bytes of source information; the BF16 dispatch 2 x hidden and the same
/// 16; combine returns 2 x hidden.
double ep_low_latency_dispatch_bytes_per_pair(bool fp8, int hidden);
double ep_low_latency_combine_bytes_per_pair(int hidden);
/// Selected pairs of a row-major top-k index array (entries other than -1).
std::int64_t ep_low_latency_selections(const std::vector<std::int64_t>& topk_idx);

/// A sample's mean, min, max and median (numpy's), in microseconds.
struct EpLowLatencyTiming {
  double avg_us = 0;
  double min_us = 0;
  double max_us = 0;
  double median_us = 0;
};
EpLowLatencyTiming ep_low_latency_summarize(std::vector<double> samples_us);

/// One rank's figures for one dispatch dtype.
struct EpLowLatencyRun {
  bool fp8 = true;
  std::int64_t selections = 0;  // this rank's selected pairs
  double dispatch_bytes = 0;
  double combine_bytes = 0;
  EpLowLatencyTiming pair;      // dispatch + combine, no hook
  EpLowLatencyTiming dispatch;  // no hook
  EpLowLatencyTiming combine;
  EpLowLatencyTiming dispatch_send;  // with the hook: the send call, then the hook alone
  EpLowLatencyTiming dispatch_recv;
  EpLowLatencyTiming combine_send;
  EpLowLatencyTiming combine_recv;
};
/// Sets the byte figures of a run from its selections and the hidden size.
void ep_low_latency_fill_bytes(EpLowLatencyRun& run, int hidden);

struct EpLowLatencyReport {
  EpLowLatencyShape shape;
  int sms = 24;
  int warmup = 20;
  int iters = 50;
  std::uint64_t seed = 0;
  std::string gpu;
  std::vector<EpCheck> checks;
  /// This rank's check failures as "name: message".
  std::vector<std::string> local_failures;
  /// by_rank[r]: rank r's runs, FP8 first then BF16 (rank 0 holds every
  /// rank's; the others their own only).
  std::vector<std::vector<EpLowLatencyRun>> by_rank;
  bool checks_passed() const;
};

/// "[config] num_tokens=128, hidden=7168, num_topk=8, num_experts=288, ranks=2, num_sms=24"
std::string ep_low_latency_config_line(const EpLowLatencyReport& report);
/// DeepEP's three lines for one rank's run, "[rank R] " first:
/// "Dispatch + combine bandwidth: X GB/s, avg_t=... us, min_t=... us, max_t=... us",
/// "Dispatch bandwidth: X GB/s, avg_t=... us | Combine bandwidth: Y GB/s, avg_t=... us",
/// "Dispatch send/recv time: A + B us | Combine send/recv time: C + D us".
/// Bandwidths from the mean times, as DeepEP's.
std::vector<std::string> ep_low_latency_deepep_lines(const EpLowLatencyRun& run, int rank);
/// Rank 0's figures in nccl-tests' style: op, dtype, hook, median/avg/min
/// time and GB/s (from the median).
std::string ep_low_latency_table(const EpLowLatencyReport& report);
/// Config, checks, then per dtype a heading and every rank's DeepEP lines,
/// then the table.
std::string render_ep_low_latency_report(const EpLowLatencyReport& report);
nlohmann::json ep_low_latency_report_json(const EpLowLatencyReport& report, int exit_code);
nlohmann::json to_json(const EpLowLatencyRun& run);
/// The inverse of to_json(EpLowLatencyRun) (how ranks send rank 0 their figures);
/// false for a malformed object.
bool from_json(const nlohmann::json& j, EpLowLatencyRun& run);

}  // namespace epkit::bench
