#include "ep_harness/conformance_rank.h"

#ifdef EPKIT_WITH_CUDA

#include <fmt/format.h>

#include <cstdlib>
#include <memory>

#include "ep_harness/node_nics.h"
#include "runtime/gpu_rank.h"

namespace epkit::harness {

int run_conformance_rank(const host::Host& host, const runtime::LaunchInfo& launch,
                         runtime::RankIo& io, ConformanceOptions options,
                         const std::function<void(const ConformanceReport&)>& write_summary) {
  std::unique_ptr<runtime::GpuRank> joined;
  if (int rc = runtime::open_gpu_rank(host, launch, io, options.timeout_s, joined);
      rc != runtime::k_gpu_ok) {
    return rc;
  }
  auto& r = *joined;
  // Fault injection for the suite's own test (tests/gpu/gpu_tests.cc,
  // EpConformance.FlippedBitIsCaught): the rank named flips one bit of its
  // received rows, and the run must fail.
  if (auto flip = host.env().get_nonempty("EPKIT_TEST_EP_FLIP_BIT")) {
    char* end = nullptr;
    const long n = std::strtol(flip->c_str(), &end, 10);
    if (end == flip->c_str() || *end != 0 || n < 0 || n >= launch.world_size) {
      io.line(fmt::format("FAIL: EPKIT_TEST_EP_FLIP_BIT is not a rank of 0..{}",
                          launch.world_size - 1));
      return runtime::k_gpu_usage;
    }
    options.flip_bit_rank = static_cast<int>(n);
  }
  // Across nodes: the NIC each GPU should use, printed before the run and
  // checked from the NIC counters after it (one watcher per node).
  auto nics = start_node_nic_watch(host, launch, r, io);
  auto report = run_conformance(r, options, [&](const std::string& text) { io.line(text); });
  if (nics)
    for (const auto& l : nics->finish().lines) io.line(l);
  if (!report) {
    r.session->abort();
    io.line("FAIL: " + report.error().message);
    // A shape the rank count cannot split is the user's flags, not the GPU.
    return report.error().code == ErrorCode::invalid ? runtime::k_gpu_usage
                                                     : runtime::exit_code_for(report.error());
  }
  if (launch.rank == 0 && write_summary) write_summary(*report);
  int code = report->failed == 0 ? runtime::k_gpu_ok : runtime::k_gpu_wrong_data;
  return runtime::close_gpu_rank(r, io, "test/ep/done", options.timeout_s, code);
}

}  // namespace epkit::harness

#endif
