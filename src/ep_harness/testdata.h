// Inputs for the conformance suite and `epkit bench ep`, made on the GPU from
// a seed (a counter-based hash, so every rank and every run can be fresh or
// reproduced): DeepEP's test_intranode.py inputs.
#pragma once

#include <epkit/ep.h>
#include <epkit/result.h>

#include <cstdint>

#include "ep/testing.h"

namespace epkit::harness {

struct TestShape {
  int num_tokens = 4096;
  int hidden = 7168;
  int num_topk = 8;
  int num_experts = 256;
};

enum class XKind { random, rank_constant };

struct TestInputs {
  ep::DeviceTensor x;             // BF16 [tokens, hidden]: N(0,1) values, or every element = rank
  ep::DeviceTensor x_fp8;         // FP8 E4M3 of x, per-128-channel amax / 448 scaling
  ep::DeviceTensor x_scales;      // FP32 [tokens, hidden / 128], COLUMN-major storage
  ep::TensorView x_scales_view;   // column-major view of x_scales
  ep::DeviceTensor topk_idx;      // int64 [tokens, topk]: top-k of |randn| + 1, no repeats
  ep::DeviceTensor topk_idx32;    // the same as int32
  ep::DeviceTensor topk_weights;  // FP32 [tokens, topk]: random, or = rank for rank_constant
};

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

Result<TestInputs> make_test_inputs(const TestInputOptions& options, cudaStream_t stream);

}  // namespace epkit::harness
