// The host half of make_test_inputs (testdata.h): the top-k routing and the
// weights, drawn from a seeded std::mt19937_64 and uploaded. Apart so that
// the CPU tests can check it.
#pragma once

#include <epkit/result.h>

#include <cstdint>
#include <vector>

#include "ep_harness/testdata.h"

namespace epkit::harness {

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
