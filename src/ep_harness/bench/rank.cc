#include "ep_harness/bench/rank.h"

#ifdef EPKIT_WITH_CUDA

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <type_traits>

#include "ep_harness/bench/low_latency_run.h"
#include "ep_harness/bench/run.h"
#include "ep_harness/node_nics.h"
#include "runtime/gpu_rank.h"

namespace epkit::harness {
namespace {

// The engine says unavailable when this node cannot run it (no peer access
// between the GPUs, for one): that is exit 12, not a lost peer. Invalid is a
// shape the launch cannot take (nodes of unequal size, more than 8 ranks on
// a node, SMs the low-latency kernels cannot have): the user's flags.
int buffer_exit_code(const Error& e) {
  return e.code == ErrorCode::unavailable ? runtime::k_gpu_unavailable
         : e.code == ErrorCode::invalid   ? runtime::k_gpu_usage
                                          : runtime::exit_code_for(e);
}

// A failure once the rank has joined: the job is aborted, so that no other
// rank waits for this one, and the reason said.
int abort_rank(runtime::GpuRank& r, runtime::RankIo& io, int code, const std::string& why) {
  r.session->abort();
  io.line("FAIL: " + why);
  return code;
}

int buffer_failed(runtime::GpuRank& r, runtime::RankIo& io, const Error& e) {
  return abort_rank(r, io, buffer_exit_code(e), "ep::Buffer::create: " + e.message);
}

/// What both modes do first: the experts must split over the ranks, then the
/// rank joins the job.
int join_rank(const host::Host& host, const runtime::LaunchInfo& launch, runtime::RankIo& io,
              const EpBenchRankOptions& o, std::unique_ptr<runtime::GpuRank>& joined) {
  if (o.experts % launch.world_size != 0) {
    io.line(fmt::format("FAIL: --experts {} does not split evenly over {} ranks", o.experts,
                        launch.world_size));
    return runtime::k_gpu_usage;
  }
  return runtime::open_gpu_rank(host, launch, io, o.timeout_s, joined);
}

/// What both modes do after their run: every rank's failed checks, a barrier
/// (no rank frees its share while another may still read it), `after_free`,
/// then rank 0's summary, then the rank's end.
template <typename Report>
int end_rank(runtime::GpuRank& r, const runtime::LaunchInfo& launch, runtime::RankIo& io,
             const EpBenchRankOptions& o, std::unique_ptr<ep::Buffer>& buffer, const Report& report,
             const std::function<void()>& after_free, const EpBenchSummaryFn& write_summary) {
  for (const auto& f : report.local_failures) io.line("FAIL: check " + f);
  const int code = report.checks_passed() ? runtime::k_gpu_ok : runtime::k_gpu_wrong_data;
  if (auto done = buffer->barrier(); !done) {
    return abort_rank(r, io, runtime::exit_code_for(done.error()), done.error().message);
  }
  buffer.reset();
  if (after_free) after_free();
  if (launch.rank == 0 && write_summary) {
    EpBenchSummary summary;
    if constexpr (std::is_same_v<Report, bench::EpReport>) {
      summary.normal = &report;
    } else {
      summary.low_latency = &report;
    }
    summary.code = code;
    write_summary(summary);
  }
  return runtime::close_gpu_rank(r, io, "bench/done", o.timeout_s, code);
}

int normal_rank(const host::Host& host, const runtime::LaunchInfo& launch, runtime::RankIo& io,
                runtime::GpuRank& r, const EpBenchRankOptions& o,
                const EpBenchSummaryFn& write_summary) {
  EpBenchOptions eo;
  eo.shape = {o.tokens, o.hidden, o.topk, o.experts, launch.world_size};
  eo.sms = o.sms;
  eo.chunks = o.chunks;
  eo.warmup = o.warmup;
  eo.iters = o.iters;
  eo.seed = o.seed;
  eo.dump_dir = o.dump_dir;
  eo.timeout_s = o.timeout_s;
  if (o.progress) {
    const auto begin = std::chrono::steady_clock::now();
    eo.progress = [begin, &o](bench::EpOp op, int sms) {
      o.progress(op, sms,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
    };
  }
  // Across nodes: the NIC each GPU should use, before the traffic, and the
  // counters judged after it (one watcher per node), as `test ep` does.
  auto nics = start_node_nic_watch(host, launch, r, io);
  auto buffer = make_ep_buffer(r, eo);
  if (!buffer) return buffer_failed(r, io, buffer.error());
  auto report = run_ep_bench(r, **buffer, eo);
  if (!report) {
    return abort_rank(r, io, runtime::exit_code_for(report.error()), report.error().message);
  }
  auto finish_nics = [&] {
    if (nics)
      for (const auto& l : nics->finish().lines) io.line(l);
  };
  return end_rank(r, launch, io, o, *buffer, *report, finish_nics, write_summary);
}

int low_latency_rank(const runtime::LaunchInfo& launch, runtime::RankIo& io, runtime::GpuRank& r,
                     const EpBenchRankOptions& o, const EpBenchSummaryFn& write_summary) {
  EpLowLatencyBenchOptions eo;
  eo.shape = {o.tokens, o.hidden, o.topk, o.experts, launch.world_size};
  eo.sms = o.sms.front();
  eo.warmup = o.warmup;
  eo.iters = o.iters;
  eo.seed = o.seed;
  eo.timeout_s = o.timeout_s;
  eo.emulated_nic = o.emulated_nic;
  eo.nic_gbps = o.nic_gbps;
  eo.nic_latency_us = o.nic_latency_us;
  auto buffer = make_ep_low_latency_buffer(r, eo);
  if (!buffer) return buffer_failed(r, io, buffer.error());
  auto report = run_ep_low_latency_bench(r, **buffer, eo);
  if (!report) {
    const Error& e = report.error();
    // A shape or SM count the low-latency kernels refuse is the user's flags.
    return abort_rank(
        r, io, e.code == ErrorCode::invalid ? runtime::k_gpu_usage : runtime::exit_code_for(e),
        e.message);
  }
  return end_rank(r, launch, io, o, *buffer, *report, {}, write_summary);
}

}  // namespace

int run_ep_bench_rank(const host::Host& host, const runtime::LaunchInfo& launch,
                      runtime::RankIo& io, const EpBenchRankOptions& options,
                      const EpBenchSummaryFn& write_summary) {
  std::unique_ptr<runtime::GpuRank> joined;
  if (int rc = join_rank(host, launch, io, options, joined); rc != runtime::k_gpu_ok) return rc;
  if (options.mode == EpBenchMode::low_latency) {
    return low_latency_rank(launch, io, *joined, options, write_summary);
  }
  return normal_rank(host, launch, io, *joined, options, write_summary);
}

}  // namespace epkit::harness

#endif
