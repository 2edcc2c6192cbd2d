// The EP conformance suite (`epkit test ep`): DeepEP V1's intranode test
// contract (test_intranode.py) run against ep::Buffer, plus bitwise equality
// with the NCCL reference path (ep_harness/reference.h), run-to-run determinism,
// poisoned outputs and edge cases. Runs on every rank of a started GPU job.
#pragma once

#include <epkit/ep.h>
#include <epkit/result.h>

#ifdef EPKIT_WITH_CUDA

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ep_harness/testdata.h"
#include "runtime/gpu_rank.h"

namespace epkit::harness {

enum class ConformanceMode { normal, low_latency };

struct ConformanceOptions {
  /// normal: DeepEP's test_intranode.py contract; low_latency: its
  /// test_low_latency.py (num_tokens is then num_max_dispatch_tokens_per_rank).
  ConformanceMode mode = ConformanceMode::normal;
  TestShape shape;
  int num_sms = 24;
  /// Rank 0's value is used by every rank (shared through the store).
  std::uint64_t seed = 0;
  /// Hidden sizes of the edge cases (BF16 with top-k each).
  std::vector<int> edge_hidden = {2048, 4096, 7168};
  /// Bound on every wait (store, engine, NCCL milestones).
  double timeout_s = 60.0;
  /// Fault injection, the suite's test of itself: this rank flips one bit
  /// of its recv_x (in device memory, as a faulty engine would leave it)
  /// after the second dispatch of the first normal-mode case where it
  /// receives rows. The suite must then fail. -1: no fault.
  int flip_bit_rank = -1;
  /// Across nodes: what carries the network leg (BufferOptions).
  ep::BufferOptions::NetworkLeg network_leg = ep::BufferOptions::NetworkLeg::nccl_host;
  double nic_gbps = 50;
  double nic_latency_us = 2;
  bool leg_overlap = false;  // BufferOptions::overlap_network_leg
  bool rings = false;        // BufferOptions::internode_rings
  int ring_rows = 0;         // > 0: ring_network_rows and ring_nvl_rows (shrunk rings)
};

struct ConformanceFailure {
  std::string case_name;  // "[testing] Running with FP8, with top-k (async=True, previous=False)"
  int rank = 0;
  std::string detail;  // "recv_x vs reference: row 17, byte 4: expected 0x3f, got 0xff"
};

/// The same on every rank: verdicts are combined across ranks after each
/// case, so a case fails everywhere when it failed on any rank.
struct ConformanceReport {
  int ranks = 0;
  std::uint64_t seed = 0;
  int cases = 0;
  int passed = 0;
  int failed = 0;
  std::vector<ConformanceFailure> failures;
};

using LineFn = std::function<void(const std::string&)>;

/// Runs every case on this rank; `line` is called on rank 0 only, once per
/// case ("... passed" or "... FAILED: <check> on rank r: <first mismatch>").
/// Wrong data is reported, not an error; an error is a CUDA, NCCL, engine or
/// store failure (the job cannot go on in lockstep).
Result<ConformanceReport> run_conformance(runtime::GpuRank& rank, const ConformanceOptions& options,
                                          const LineFn& line);

}  // namespace epkit::harness

#endif
