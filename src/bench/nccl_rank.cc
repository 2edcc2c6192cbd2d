#include "bench/nccl_rank.h"

#ifdef EPKIT_WITH_CUDA

#include <chrono>
#include <memory>

#include "bench/nccl_runner.h"

namespace epkit::bench {

int run_nccl_bench_rank(const host::Host& host, const runtime::LaunchInfo& launch,
                        runtime::RankIo& io, const NcclBenchRankOptions& o,
                        const std::function<void(const NcclBenchSummary&)>& write_summary) {
  auto fail = [&](int code, const std::string& why) {
    io.line("FAIL: " + why);
    return code;
  };
  auto sizes = size_sweep(o.min_bytes, o.max_bytes, o.factor, o.type.size,
                          element_granularity(o.kind, launch.world_size));
  if (!sizes) return fail(runtime::k_gpu_usage, sizes.error().message);
  std::unique_ptr<runtime::GpuRank> joined;
  if (int rc = runtime::open_gpu_rank(host, launch, io, o.timeout_s, joined);
      rc != runtime::k_gpu_ok) {
    return rc;
  }
  auto& r = *joined;
  RunOptions ro;
  ro.kind = o.kind;
  ro.type = o.type;
  ro.sizes = *sizes;
  ro.iters = o.iters;
  ro.warmup = o.warmup;
  ro.check = o.check;
  ro.root = o.root;
  ro.timeout_s = o.timeout_s;
  const auto begin = std::chrono::steady_clock::now();
  if (launch.rank == 0 && o.progress) {
    ro.progress = [&](std::size_t done, std::size_t total) {
      o.progress(done, total,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
    };
  }
  auto rows = run_sweep(*r.session, r.store(), ro);
  if (!rows) {
    r.session->abort();
    return fail(runtime::exit_code_for(rows.error()), rows.error().message);
  }
  int code = runtime::k_gpu_ok;
  if (launch.rank == 0) {
    const double avg = average_busbw(*rows);
    const std::uint64_t wrong = total_wrong(*rows);
    if (wrong != 0) {
      code = runtime::k_gpu_wrong_data;
    } else if (o.min_busbw && avg < *o.min_busbw) {
      code = runtime::k_gpu_below_busbw;
    }
    if (write_summary) write_summary(NcclBenchSummary{r, *rows, avg, wrong, code});
  }
  return runtime::close_gpu_rank(r, io, "bench/done", o.timeout_s, code);
}

}  // namespace epkit::bench

#endif
