// `epkit bench ep`: DeepEP's test_intranode.py tuning run for epkit's EP
// engine (test_internode.py's figures when the Buffer spans nodes). Every
// rank checks the engine against the reference path (NCCL send/recv,
// src/ep_harness/reference.h) bitwise, then times cached dispatch (FP8,
// BF16) and combine over a sweep of SM counts and NVL chunks, as DeepEP's
// tuning loop does, and rank 0 prints DeepEP's lines.
//
// This header is the CPU half (byte accounting, statistics, the lines and the
// JSON), tested without a GPU; the runner is CUDA-only and lives with the EP
// harness (ep_harness/bench/run.h).
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
  /// Nodes the Buffer spans (ranks / nodes per node); 1: the intranode engine.
  int nodes = 1;
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

// Across nodes (DeepEP's test_internode.py). A token crosses the network
// once per destination node, to the rank with its source's local index
// there, which forwards it over NVLink.

/// This rank's (token, destination node) pairs: every one, its own node
/// included (DeepEP's num_rdma_token_sent), and those to other nodes (the
/// rows its network leg sends).
struct EpNodePairs {
  std::int64_t all = 0;
  std::int64_t remote = 0;
};
/// From layout's num_tokens_per_rdma_rank (tokens with a destination on
/// each node). A node out of range counts no pair as its own.
EpNodePairs ep_node_pairs(const std::vector<int>& tokens_per_node, int my_node);
/// DeepEP's RDMA figure: every pair at hidden x 2 (FP8: x (1 + 4/128) / 2,
/// ep_row_bytes). Combine counts the same bytes as a BF16 dispatch (DeepEP's
/// combine_bf16_rdma_recv_bytes).
double ep_rdma_logical_bytes(EpOp op, std::int64_t all_pairs, int hidden);
/// What the network leg moved: the pairs to other nodes at the bytes the
/// engine sends per row (its packed row, wider than the data: see
/// EpWireRows), plus fixed bytes per call (the count messages of a
/// non-cached dispatch).
double ep_rdma_physical_bytes(std::int64_t remote_pairs, std::int64_t wire_row_bytes,
                              std::int64_t fixed_bytes);
/// Rows of this rank's receive buffer that crossed NVLink on an internode
/// Buffer: those from sources whose local index differs from this rank's
/// (the others were forwarded by this rank itself). gbl_prefix is
/// recv_gbl_rank_prefix_sum (rows from global rank r are [p[r-1], p[r])).
std::int64_t ep_nvl_remote_rows(const std::vector<int>& gbl_prefix, int ranks_per_node, int me);

/// Bytes the network leg sends per (token, node) pair, by call: the engine's
/// packed row (x, FP8 scales, and for a non-cached dispatch the top-k
/// indices and weights, the source index and the node's rank mask, padded
/// to 16 bytes), and combine's BF16 partial sums.
struct EpWireRows {
  std::int64_t dispatch_fp8 = 0;   // cached: x and scales
  std::int64_t dispatch_bf16 = 0;  // cached: x
  std::int64_t full_fp8 = 0;       // non-cached, with the routing
  std::int64_t full_bf16 = 0;
  std::int64_t combine = 0;  // hidden x 2 (the timed combines carry no weights)
  /// A non-cached dispatch also sends one count message to every other node.
  std::int64_t messages = 0;
  /// The row bytes and the fixed bytes of a call of `op`.
  std::int64_t row(EpOp op, bool cached) const;
  std::int64_t fixed(EpOp op, bool cached) const;
};
/// Tokens with any destination rank on each node, from this rank's
/// is_token_in_rank [tokens, ranks] (0 or 1): what layout's
/// num_tokens_per_rdma_rank must hold. Empty for a bad shape.
std::vector<int> ep_tokens_per_node(const std::vector<std::uint8_t>& is_token_in_rank, int ranks,
                                    int ranks_per_node);

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
  double logical_bytes = 0;  // rank 0's, (NVL)
  double physical_bytes = 0;
  /// Internode only (0 otherwise): DeepEP's (RDMA) bytes and what the
  /// network leg moved, rank 0's.
  double rdma_logical_bytes = 0;
  double rdma_physical_bytes = 0;
  double logical_gbps() const { return ep_gbps(logical_bytes, rank0.median_us); }
  double physical_gbps() const { return ep_gbps(physical_bytes, rank0.median_us); }
  double rdma_logical_gbps() const { return ep_gbps(rdma_logical_bytes, rank0.median_us); }
  double rdma_physical_gbps() const { return ep_gbps(rdma_physical_bytes, rank0.median_us); }
};

/// What one rank moved, for the byte figures of its rows.
struct EpRankBytes {
  std::int64_t recv_rows = 0;
  std::int64_t remote_rows = 0;  // the received rows that crossed NVLink
  EpNodePairs pairs;             // internode only
};
/// Sets a row's byte figures (by its op and whether it is cached or
/// staged): (NVL) logical and physical always, (RDMA) across nodes.
void ep_fill_bytes(EpRow& row, const EpShape& shape, const EpRankBytes& bytes,
                   const EpWireRows& wire);

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
  std::vector<std::int64_t> remote_rows;  // by rank: rows that crossed NVLink
  std::vector<EpRow> rows;                // cached sweep: op, then SMs, then chunk
  std::vector<EpRow> non_cached;          // one per dispatch dtype, and the staged combine
  // Internode only.
  std::string network;                          // Buffer::network()
  std::vector<std::int64_t> node_pairs;         // by rank: EpNodePairs::all
  std::vector<std::int64_t> remote_node_pairs;  // by rank: EpNodePairs::remote
  EpWireRows wire;                              // the same on every rank
  bool internode() const { return shape.nodes > 1; }
  bool checks_passed() const;
};

/// The fastest row of `op` at `sms` (lowest rank-0 median; the first on a
/// tie), or nullptr.
const EpRow* ep_best(const std::vector<EpRow>& rows, EpOp op, int sms);

/// "[config] num_tokens=4096, hidden=7168, num_topk=8, num_experts=256, ranks=4",
/// with " (2 nodes x 8)" after the ranks across nodes.
std::string ep_config_line(const EpShape& shape);
/// "[check] dispatch (BF16) vs reference (...): passed on 4 ranks"
std::string ep_check_line(const EpCheck& check, int ranks);
/// Every check passed (both modes' reports).
bool ep_checks_passed(const std::vector<EpCheck>& checks);
/// The checks as `--json` gives them (both modes' reports).
nlohmann::json ep_checks_json(const std::vector<EpCheck>& checks);
/// "[tuning] SMs 24, NVL chunk 4: 402.06 GB/s (NVL), 527.08 us, physical 301.55 GB/s";
/// across nodes test_internode.py's order, time first, then RDMA and NVL:
/// "[tuning] SMs 24, NVL chunk 4: 722.00 us, 81.00 GB/s (RDMA), 265.00 GB/s (NVL),
/// physical 40.60 GB/s (RDMA), 232.00 GB/s (NVL)".
std::string ep_tuning_line(const EpRow& row, bool internode = false);
/// "[tuning] Best dispatch (FP8): SMs 24, NVL chunk 4, 352.18 GB/s (NVL), t: 310.26 us, ..."
/// and DeepEP's "[tuning] Best combine: SMs 24, NVL chunk 4: ..." (a colon
/// after the chunk for combine, a comma for dispatch, as DeepEP prints).
/// Across nodes test_internode.py's punctuation: "...NVL chunk 4: T us, ..."
/// for dispatch, "...NVL chunk 4, T us, ..." for combine.
std::string ep_best_line(const EpRow& row, bool internode = false);
/// "[tuning] Non-cached dispatch (FP8): SMs 24, NVL chunk 4, X GB/s (NVL), t: Y us, ..."
std::string ep_non_cached_line(const EpRow& row, bool internode = false);
/// Across nodes: what each figure counts, per rank 0's rows and pairs.
std::vector<std::string> ep_internode_bytes_lines(const EpReport& report);
/// Across nodes: the best row per (op, SM count) and the non-cached rows as
/// a table in nccl-tests' style ('#' header lines, right-aligned columns),
/// logical and physical RDMA and NVL GB/s side by side.
std::string ep_internode_table(const EpReport& report);
/// Every line rank 0 prints, in order: config, checks, bytes, then per op
/// and SM count the chunk rows and the best line (and the non-cached line
/// after the best of its dtype), a blank line closing each op; across nodes
/// the table last.
std::string render_ep_report(const EpReport& report);
nlohmann::json ep_report_json(const EpReport& report, int exit_code);

}  // namespace epkit::bench
