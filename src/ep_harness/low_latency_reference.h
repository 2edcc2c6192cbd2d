// The low-latency mode's reference, on the host from every rank's inputs
// (all-gathered): where each selection lands (expert-major rows, sources in
// rank order, tokens in order), the FP8 cast DeepEP's kernels do (per 128
// channels, optionally power-of-two scales), its dequantisation (DeepEP's
// per_token_cast_back) and the weighted combine. Shares no code with the
// engine; pure functions, tested without a GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "ep_harness/conformance_checks.h"

namespace epkit::harness::low_latency_reference {

/// FP8 E4M3 (no infinities, max 448) of v: round to nearest even,
/// saturating at +-448 (what the GPU's satfinite conversion does).
std::uint8_t float_to_e4m3(float v);

/// One BF16 row cast as the dispatch does: per 128 channels amax (at least
/// 1e-4), scale 448 / amax and scale_inv amax / 448, or with round_scale
/// scale_inv = 2^ceil(log2(amax / 448)). fp8: hidden bytes; scales: hidden / 128.
void cast_row(const std::uint16_t* x, int hidden, bool round_scale, std::uint8_t* fp8,
              float* scales);

/// BF16 of fp8 * scale, per element (DeepEP's per_token_cast_back).
void dequantize_row(const std::uint8_t* fp8, const float* scales, int hidden, std::uint16_t* out);

/// The exponent byte of a scale (UE8M0), as the dispatch packs them.
std::uint8_t ue8m0_of(float scale);

/// Where a received row came from.
struct Source {
  int rank = 0;
  int token = 0;
  int k = 0;
};

/// What one rank must receive from a low-latency dispatch.
struct ExpectedDispatch {
  int local_experts = 0;
  std::int64_t rows_per_expert = 0;
  std::vector<int> recv_count;             // [local experts]
  std::vector<std::int64_t> layout_range;  // [local experts * ranks]: first << 32 | rows
  std::vector<std::vector<Source>> rows;   // [local experts][recv_count]
};

/// `max_tokens`: num_max_dispatch_tokens_per_rank. Indices outside
/// [0, experts) select nothing.
ExpectedDispatch expected_dispatch(const conformance::GatheredRouting& routing, int rank,
                                   int max_tokens);

/// The combined rows of one rank's tokens when each expert returns
/// `values[token]` (its input, after the dispatch's cast and back for FP8):
/// per token, acc = fma(value, weight_k, acc) over the valid k in order from
/// 0, rounded once to BF16. values: BF16 [tokens, hidden].
std::vector<std::uint16_t> expected_combine(const std::vector<std::uint16_t>& values,
                                            const std::vector<std::int64_t>& topk_idx,
                                            const std::vector<float>& topk_weights, int tokens,
                                            int topk, int experts, int hidden);

/// DeepEP's checks of one expert's received rows for the rank-constant input
/// (x = rank - 128, the token index in the last 128 channels). rows: the
/// dequantised values [count, hidden]; src_info: [count]; ranges: this
/// expert's layout_range [ranks]. Each row is constant before the last 128
/// channels; without round_scale the last 128 equal the token index and
/// the rows of source j equal j - 128; with it the last channel is close to
/// the token index (calc_diff < 0.007).
conformance::Verdict deepep_rank_constant_check(const std::vector<float>& rows, int hidden,
                                                const std::vector<int>& src_info,
                                                const std::vector<std::int64_t>& ranges,
                                                bool round_scale);

/// DeepEP's combine check: no NaN, and calc_diff(x * (sum of the weights of
/// valid k), combined) < limit. x, combined: [tokens, hidden].
conformance::Verdict deepep_combine_check(const std::vector<float>& combined,
                                          const std::vector<float>& x,
                                          const std::vector<std::int64_t>& topk_idx,
                                          const std::vector<float>& topk_weights, int topk,
                                          int experts, int hidden, double limit);

}  // namespace epkit::harness::low_latency_reference
