// One rank of `epkit test ep`, from its start to its end: the rank joins the
// job (runtime/rank_session.h), runs the conformance suite (conformance.h)
// with the NIC watch of a run across nodes (node_nics.h), and closes. Rank 0
// hands the report to the command, which prints it.
#pragma once

#include <epkit/result.h>

#ifdef EPKIT_WITH_CUDA

#include <functional>

#include "ep_harness/conformance.h"
#include "host/host.h"
#include "runtime/launch.h"
#include "runtime/rank_session.h"

namespace epkit::harness {

/// Runs this rank of the suite and returns its exit code (runtime::GpuExit):
/// a line per case on rank 0 through `io`; on rank 0, `write_summary` with
/// the report before the rank leaves the job. `options.flip_bit_rank` is
/// taken from EPKIT_TEST_EP_FLIP_BIT, the suite's test of itself
/// (tests/gpu/gpu_tests.cc, EpConformance.FlippedBitIsCaught).
int run_conformance_rank(const host::Host& host, const runtime::LaunchInfo& launch,
                         runtime::RankIo& io, ConformanceOptions options,
                         const std::function<void(const ConformanceReport&)>& write_summary);

}  // namespace epkit::harness

#endif
