// The host half of make_test_inputs (testdata.h): its options, the top-k
// routing and the weights, drawn from a seeded std::mt19937_64 and uploaded.
// Apart, with no GPU type, so that the CPU tests can check it.
#pragma once

#include <epkit/result.h>

#include <cstdint>
#include <vector>

namespace epkit::harness {

struct TestShape {
  int num_tokens = 4096;
  int hidden = 7168;
  int num_topk = 8;
  int num_experts = 256;
};

enum class XKind { random, rank_constant };

struct TestInputOptions {
  TestShape shape;
  XKind kind = XKind::random;
  std::uint64_t seed = 0;  // mixed with the rank
  int rank = 0;
  int num_ranks = 1;
  /// Share of top-k slots set to -1 (tokens routed to fewer experts);
  /// 1.0 routes every token nowhere.
  double masked_fraction = 0.0;
  /// All tokens choose experts of this rank only (-1 = off).
  int only_rank = -1;
};

struct TestRouting {
  std::vector<std::int64_t> topk_idx;  // [tokens * topk], -1 = masked slot
  std::vector<float> topk_weights;     // [tokens * topk]
};

/// The seed of one stream of draws (`tag` names which: x, experts, mask,
/// weights), mixed from the user's seed and the rank so that ranks differ.
std::uint64_t test_stream_key(std::uint64_t seed, int rank, std::uint64_t tag);

/// Checks the options (a shape that splits evenly, a hidden size that is a
/// multiple of 128, enough experts for the top-k, ...).
Result<void> check_test_options(const TestInputOptions& options);

/// Per token, the top-k experts by |N(0,1)| + 1 score (distinct, highest
/// score first, as torch.topk), drawn from every expert or only from
/// only_rank's. Then round(masked_fraction * tokens * topk) slots, chosen at
/// random, become -1. Weights are N(0,1), or the rank for rank_constant.
Result<TestRouting> make_test_routing(const TestInputOptions& options);

}  // namespace epkit::harness
