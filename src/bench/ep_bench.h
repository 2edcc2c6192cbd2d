// `epkit bench ep`: DeepEP's test_intranode.py tuning run for epkit's EP
// engine. Every rank checks the engine against the reference path (NCCL
// send/recv, src/ep/reference.h) bitwise, then times cached dispatch (FP8,
// BF16) and combine over a sweep of SM counts and NVL chunks, as DeepEP's
// tuning loop does, and rank 0 prints DeepEP's lines.
//
// This header is the CPU half (byte accounting, statistics, the lines and the
// JSON), tested without a GPU; the runner is CUDA-only and lives with the EP
// harness (ep_harness/bench/ep_bench_runner.h).
#pragma once

#include <epkit/result.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace epkit::bench {

enum class EpOp { dispatch_fp8, dispatch_bf16, combine };
/// "dispatch (FP8)", "dispatch (BF16)", "combine": the words of DeepEP's
/// best lines.
const char* to_string(EpOp op);
/// "dispatch_fp8", "dispatch_bf16", "combine": the JSON names.
const char* json_name(EpOp op);

struct EpShape {
  int tokens = 4096;
  int hidden = 7168;
  int topk = 8;
  int experts = 256;
  int ranks = 1;
};

/// Bytes one received row takes: BF16 2 x hidden; FP8 hidden plus its FP32
/// scale per 128 channels (7168 -> 7392). Combine moves BF16 rows.
std::int64_t ep_row_bytes(EpOp op, int hidden);
/// DeepEP's figure: every received row, local ones included, at
/// recv_x.numel() x 2 (FP8: x (1 + 4/128) / 2, which is ep_row_bytes).
/// Combine counts the same bytes as a BF16 dispatch.
double ep_logical_bytes(EpOp op, std::int64_t recv_rows, int hidden);
/// What crossed NVLink into (dispatch) or out of (combine) this GPU: the
/// rows received from other ranks only. Combine sends each received row
/// back to its source, so it moves the same count. Routing metadata (top-k,
/// source indices) is not counted: a cached dispatch and the timed combine
/// carry none.
double ep_physical_bytes(EpOp op, std::int64_t remote_rows, int hidden);
/// bytes / time as GB/s (1e9 bytes); 0 for a zero time.
double ep_gbps(double bytes, double time_us);

/// Rows this rank received from other ranks, from the rank prefix matrix
/// (element (i, j) = rows rank j received from ranks 0..i, by row).
std::int64_t ep_remote_rows(const std::vector<int>& rank_prefix_matrix, int ranks, int me);

struct EpTiming {
  double median_us = 0;
  double min_us = 0;
  double avg_us = 0;
};
/// numpy's median (mean of the two middle samples for an even count), min
/// and mean. An empty sample gives zeros.
EpTiming ep_summarize(std::vector<double> samples_us);

struct EpRow {
  EpOp op = EpOp::dispatch_bf16;
  int sms = 24;
  int nvl_chunk = 4;
  bool cached = true;  // false: the one non-cached dispatch per dtype
  /// Combine of rows held outside the Buffer (copied into it first), next to
  /// the timed combine of the dispatch's own recv_x.
  bool staged = false;
  EpTiming rank0;            // the printed figures are rank 0's, as DeepEP's
  double max_median_us = 0;  // slowest rank's median
  double logical_bytes = 0;  // rank 0's
  double physical_bytes = 0;
  double logical_gbps() const { return ep_gbps(logical_bytes, rank0.median_us); }
  double physical_gbps() const { return ep_gbps(physical_bytes, rank0.median_us); }
};

/// One comparison with the reference, over every rank.
struct EpCheck {
  std::string name;  // "dispatch (BF16)"
  std::string what;  // "recv_x, recv_topk_*, recv_src_idx bitwise; counts"
  std::vector<int> failed_ranks;
  std::string first_failure;  // the lowest failing rank's message
  bool passed() const { return failed_ranks.empty(); }
};

struct EpReport {
  EpShape shape;
  std::uint64_t seed = 0;
  int warmup = 20;
  int iters = 50;
  std::vector<int> sms;
  std::vector<int> chunks;
  /// The configuration the full checks and the non-cached dispatch used.
  int check_sms = 24;
  int check_chunk = 4;
  std::string gpu;
  std::vector<EpCheck> checks;
  /// This rank's check failures as "name: message" (every rank has its own).
  std::vector<std::string> local_failures;
  std::vector<std::int64_t> recv_rows;    // by rank (rank 0 holds every rank's)
  std::vector<std::int64_t> remote_rows;  // by rank
  std::vector<EpRow> rows;                // cached sweep: op, then SMs, then chunk
  std::vector<EpRow> non_cached;          // one per dispatch dtype, and the staged combine
  bool checks_passed() const;
};

/// The fastest row of `op` at `sms` (lowest rank-0 median; the first on a
/// tie), or nullptr.
const EpRow* ep_best(const std::vector<EpRow>& rows, EpOp op, int sms);

/// "[config] num_tokens=4096, hidden=7168, num_topk=8, num_experts=256, ranks=4"
std::string ep_config_line(const EpShape& shape);
/// "[check] dispatch (BF16) vs reference (...): passed on 4 ranks"
std::string ep_check_line(const EpCheck& check, int ranks);
/// "[tuning] SMs 24, NVL chunk 4: 402.06 GB/s (NVL), 527.08 us, physical 301.55 GB/s"
std::string ep_tuning_line(const EpRow& row);
/// "[tuning] Best dispatch (FP8): SMs 24, NVL chunk 4, 352.18 GB/s (NVL), t: 310.26 us, ..."
/// and DeepEP's "[tuning] Best combine: SMs 24, NVL chunk 4: ..." (a colon
/// after the chunk for combine, a comma for dispatch, as DeepEP prints).
std::string ep_best_line(const EpRow& row);
/// "[tuning] Non-cached dispatch (FP8): SMs 24, NVL chunk 4, X GB/s (NVL), t: Y us, ..."
std::string ep_non_cached_line(const EpRow& row);
/// Every line rank 0 prints, in order: config, checks, bytes, then per op
/// and SM count the chunk rows and the best line (and the non-cached line
/// after the best of its dtype), a blank line closing each op.
std::string render_ep_report(const EpReport& report);
nlohmann::json ep_report_json(const EpReport& report, int exit_code);

}  // namespace epkit::bench
