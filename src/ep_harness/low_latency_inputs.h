// Host-made inputs of the low-latency conformance cases, as DeepEP's
// test_low_latency.py makes them: x either rank-constant ((rank - 128)
// everywhere, the token index in the last 128 channels) or N(0, 1) * 0.1; the
// top-k of |N(0, 1)| + 1 scores; |N(0, 1)| weights; some slots set to -1.
// Deterministic from (seed, rank).
#pragma once

#include <cstdint>
#include <vector>

namespace epkit::harness {

struct LowLatencyInputOptions {
  int num_tokens = 128;
  int hidden = 7168;
  int num_topk = 8;
  int num_experts = 288;
  int rank = 0;
  bool rank_constant = true;
  std::uint64_t seed = 0;
  /// Random (token, k) slots set to -1 (DeepEP sets 10; a slot may repeat).
  int masked_slots = 10;
  /// Every slot -1: this rank sends nothing.
  bool mask_all = false;
};

struct LowLatencyInputs {
  std::vector<std::uint16_t> x;        // BF16 [tokens, hidden]
  std::vector<std::int64_t> topk_idx;  // [tokens, topk], distinct experts or -1
  std::vector<float> topk_weights;     // [tokens, topk]
};

/// DeepEP's rank offset: x = rank - 128, so that BF16 holds every rank exactly.
constexpr int k_low_latency_rank_offset = 128;

LowLatencyInputs make_low_latency_inputs(const LowLatencyInputOptions& options);

}  // namespace epkit::harness
