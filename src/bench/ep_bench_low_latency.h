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
struct EpLlShape {
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
double ep_ll_dispatch_bytes_per_pair(bool fp8, int hidden);
double ep_ll_combine_bytes_per_pair(int hidden);
/// Selected pairs of a row-major top-k index array (entries other than -1).
std::int64_t ep_ll_selections(const std::vector<std::int64_t>& topk_idx);

/// A sample's mean, min, max and median (numpy's), in microseconds.
struct EpLlTiming {
  double avg_us = 0;
  double min_us = 0;
  double max_us = 0;
  double median_us = 0;
};
EpLlTiming ep_ll_summarize(std::vector<double> samples_us);

/// One rank's figures for one dispatch dtype.
struct EpLlRun {
  bool fp8 = true;
  std::int64_t selections = 0;  // this rank's selected pairs
  double dispatch_bytes = 0;
  double combine_bytes = 0;
  EpLlTiming pair;      // dispatch + combine, no hook
  EpLlTiming dispatch;  // no hook
  EpLlTiming combine;
  EpLlTiming dispatch_send;  // with the hook: the send call, then the hook alone
  EpLlTiming dispatch_recv;
  EpLlTiming combine_send;
  EpLlTiming combine_recv;
};
/// Sets the byte figures of a run from its selections and the hidden size.
void ep_ll_fill_bytes(EpLlRun& run, int hidden);

struct EpLlReport {
  EpLlShape shape;
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
  std::vector<std::vector<EpLlRun>> by_rank;
  bool checks_passed() const;
};

/// "[config] num_tokens=128, hidden=7168, num_topk=8, num_experts=288, ranks=2, num_sms=24"
std::string ep_ll_config_line(const EpLlReport& report);
/// DeepEP's three lines for one rank's run, "[rank R] " first:
/// "Dispatch + combine bandwidth: X GB/s, avg_t=... us, min_t=... us, max_t=... us",
/// "Dispatch bandwidth: X GB/s, avg_t=... us | Combine bandwidth: Y GB/s, avg_t=... us",
/// "Dispatch send/recv time: A + B us | Combine send/recv time: C + D us".
/// Bandwidths from the mean times, as DeepEP's.
std::vector<std::string> ep_ll_deepep_lines(const EpLlRun& run, int rank);
/// Rank 0's figures in nccl-tests' style: op, dtype, hook, median/avg/min
/// time and GB/s (from the median).
std::string ep_ll_table(const EpLlReport& report);
/// Config, checks, then per dtype a heading and every rank's DeepEP lines,
/// then the table.
std::string render_ep_ll_report(const EpLlReport& report);
nlohmann::json ep_ll_report_json(const EpLlReport& report, int exit_code);
nlohmann::json to_json(const EpLlRun& run);
/// The inverse of to_json(EpLlRun) (how ranks send rank 0 their figures);
/// false for a malformed object.
bool from_json(const nlohmann::json& j, EpLlRun& run);

}  // namespace epkit::bench
