// The checks of the EP conformance suite (`epkit test ep`) as pure host
// functions over host copies of the outputs, so each can be tested on small
// hand-made arrays, including the inputs it must reject.
//
// A check returns a Verdict: empty when it passed, otherwise one line naming
// the first mismatching index and both values, e.g.
// "row 17 of 412, column 3: expected 2, got 65535".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace epkit::harness::conformance {

using Verdict = std::optional<std::string>;

/// The first failed check of a case on this rank; later checks still run
/// their collectives so every rank stays in step.
struct Checks {
  Verdict first;
  void operator()(const std::string& what, const Verdict& v) {
    if (!first && v) first = what + ": " + *v;
  }
  void require(const std::string& what, bool ok, const std::string& detail) {
    if (!ok) (*this)(what, detail);
  }
};

/// DeepEP's calc_diff in double: 1 - 2 sum((x+1)(y+1)) / sum((x+1)^2 + (y+1)^2).
/// 0 for identical inputs (and for two empty ones).
double calc_diff(const std::vector<double>& x, const std::vector<double>& y);

float bf16_to_float(std::uint16_t bits);
/// Round to nearest even (what the GPU's __float2bfloat16 does).
std::uint16_t float_to_bf16(float value);
float fp8_e4m3_to_float(std::uint8_t bits);

/// BF16 bytes -> floats.
std::vector<float> decode_bf16(const std::vector<std::uint8_t>& bytes);
/// FP8 E4M3 rows times their per-128-channel scales (row-major [rows,
/// hidden / 128]), rounded to BF16 as DeepEP's per_token_cast_back does.
std::vector<float> dequantize_fp8(const std::vector<std::uint8_t>& fp8,
                                  const std::vector<float>& scales, std::int64_t rows,
                                  std::int64_t hidden);
/// int32 or int64 element bytes -> int64.
std::vector<std::int64_t> decode_index(const std::vector<std::uint8_t>& bytes, int elem_size);

template <typename T>
std::vector<T> as_vector(const std::vector<std::uint8_t>& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  for (std::size_t i = 0; i < out.size(); ++i) {
    T v;
    __builtin_memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    out[i] = v;
  }
  return out;
}

/// Whether an all-gather of parts of `part_bytes` returned rank `rank`'s
/// part as `mine` (what it sent): the references are built from the
/// gathered parts, so a part read before its upload landed would have every
/// rank check against wrong values.
bool gathered_own_part_intact(const void* all, std::size_t all_bytes, const void* mine,
                              std::size_t part_bytes, int rank);

/// Element-wise equality of two integer lists of the same meaning.
Verdict compare_ints(const std::vector<std::int64_t>& expect, const std::vector<std::int64_t>& got);
Verdict compare_ints(const std::vector<int>& expect, const std::vector<int>& got);

/// Bitwise equality; `row_bytes` (> 0) turns the first differing byte into
/// "row r, byte b".
Verdict compare_bytes(const std::vector<std::uint8_t>& expect, const std::vector<std::uint8_t>& got,
                      std::size_t row_bytes);
/// The first `rows` rows of `got` equal `expect` (which has exactly that many).
Verdict compare_prefix(const std::vector<std::uint8_t>& expect,
                       const std::vector<std::uint8_t>& got, std::size_t row_bytes,
                       std::int64_t rows);

/// Every rank's routing (all-gathered), what the receiving side must show.
struct GatheredRouting {
  int num_ranks = 0;
  int num_experts = 0;
  int num_topk = 0;
  std::vector<int> num_tokens;                      // by rank
  std::vector<std::vector<std::int64_t>> topk_idx;  // by rank: tokens * topk, -1 = none
  std::vector<std::vector<float>> topk_weights;     // by rank: tokens * topk
};

/// What rank `rank` must receive: rows ordered by source rank, then by token
/// index on the source (the order of DeepEP's intranode receive buffer).
struct ExpectedRecv {
  int num_recv = 0;
  std::vector<int> rank_prefix_matrix;  // [ranks * ranks]: (i, j) = rows j gets from 0..i
  std::vector<int> src_rank;            // per row
  std::vector<int> src_idx;             // per row
  std::vector<std::int64_t> topk_idx;   // per row * topk: local expert or -1
  std::vector<float> topk_weights;      // per row * topk: 0 where the index is -1
  std::vector<int> tokens_per_expert;   // per local expert, unaligned
  std::vector<int> token_reach;         // per token of `rank`: ranks it is sent to
};

ExpectedRecv expected_recv(const GatheredRouting& routing, int rank);

/// rows * cols values: every row constant and equal to its source rank, the
/// segment of source i ending at rank_prefix_matrix[i][rank].
Verdict check_rank_constant_rows(const std::vector<float>& values, std::int64_t rows,
                                 std::int64_t cols, const std::vector<int>& rank_prefix_matrix,
                                 int num_ranks, int rank);

/// The per-expert list equals the counts rounded up to `alignment`.
Verdict check_expert_list(const std::vector<int>& list, const std::vector<int>& unaligned,
                          int alignment);

/// Every index in [-1, local_experts) and each expert's occurrences equal
/// its (unaligned) count.
Verdict check_recv_topk_idx(const std::vector<std::int64_t>& idx, int num_topk, int local_experts,
                            const std::vector<int>& unaligned);

/// Weights of the rank-constant input: after the -1 slots take the row's
/// maximum, every row is constant and equal to its source rank.
Verdict check_rank_constant_weights(const std::vector<float>& weights,
                                    const std::vector<std::int64_t>& idx, int num_topk,
                                    const std::vector<int>& rank_prefix_matrix, int num_ranks,
                                    int rank);

/// Rows at `num_recv` and beyond have every top-k index -1.
Verdict check_padding(const std::vector<std::int64_t>& idx, int num_topk, int num_recv);

/// Combined rank-constant input: row t equals rank * reach[t] exactly.
Verdict check_combined_exact(const std::vector<float>& combined, std::int64_t hidden, int rank,
                             const std::vector<int>& reach);

/// Combined random input: calc_diff(combined / reach, x) < limit over the
/// tokens that went somewhere; the others must be exactly 0.
Verdict check_combined_close(const std::vector<float>& combined, const std::vector<float>& x,
                             std::int64_t hidden, const std::vector<int>& reach, double limit);

/// Combined weights equal the original ones where the index is valid
/// (calc_diff < limit).
Verdict check_combined_weights(const std::vector<float>& combined,
                               const std::vector<float>& weights,
                               const std::vector<std::int64_t>& idx, double limit);

}  // namespace epkit::harness::conformance
