// Inputs for the conformance suite and `epkit bench ep`, made on the GPU from
// a seed (a counter-based hash, so every rank and every run can be fresh or
// reproduced): DeepEP's test_intranode.py inputs.
#pragma once

#include <epkit/ep.h>
#include <epkit/result.h>

#include <cstdint>

#include "ep/testing.h"
#include "ep_harness/testdata_routing.h"  // TestShape, XKind, TestInputOptions

namespace epkit::harness {

struct TestInputs {
  ep::DeviceTensor x;             // BF16 [tokens, hidden]: N(0,1) values, or every element = rank
  ep::DeviceTensor x_fp8;         // FP8 E4M3 of x, per-128-channel amax / 448 scaling
  ep::DeviceTensor x_scales;      // FP32 [tokens, hidden / 128], COLUMN-major storage
  ep::TensorView x_scales_view;   // column-major view of x_scales
  ep::DeviceTensor topk_idx;      // int64 [tokens, topk]: top-k of |randn| + 1, no repeats
  ep::DeviceTensor topk_idx32;    // the same as int32
  ep::DeviceTensor topk_weights;  // FP32 [tokens, topk]: random, or = rank for rank_constant
};

Result<TestInputs> make_test_inputs(const TestInputOptions& options, cudaStream_t stream);

}  // namespace epkit::harness
