// The low-latency mode's conformance run (`epkit test ep --mode
// low-latency`): each case's inputs made on the host (DeepEP's
// test_low_latency.py), all-gathered over NCCL, and every output compared
// with ep_harness/low_latency_reference.h: receive counts, layout ranges,
// source indices and BF16 rows bitwise; FP8 rows and scales bitwise against
// the host cast, plus DeepEP's own checks and tolerances; combines bitwise
// against the host's FMA chain, plus DeepEP's calc_diff bound.
#pragma once

#ifdef EPKIT_WITH_CUDA

#include <epkit/ep.h>

#include "ep/testing.h"
#include "ep_harness/conformance.h"
#include "ep_harness/conformance/case.h"
#include "ep_harness/conformance_checks.h"
#include "ep_harness/reference.h"
#include "runtime/nccl_session.h"

namespace epkit::harness {

struct LowLatencySuite {
  runtime::NcclSession* session = nullptr;
  NcclContext nccl;
  ep::Buffer* buffer = nullptr;
  cudaStream_t stream = nullptr;  // the caller's stream of the engine calls
  const ConformanceOptions* options = nullptr;
  std::uint64_t seed = 0;
  int rank = 0;
  int ranks = 1;
  /// A combine input outside the Buffer, [local experts, ranks * tokens, hidden].
  ep::DeviceMemory combine_x;

  runtime::Deadline step() const { return runtime::Deadline::after_seconds(options->timeout_s); }
};

Result<conformance::Verdict> run_low_latency_case(LowLatencySuite& s, const LowLatencyCase& c,
                                                  int case_no);

}  // namespace epkit::harness

#endif
