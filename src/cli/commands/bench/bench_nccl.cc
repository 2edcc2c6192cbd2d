#include "cli/commands/bench/bench_nccl.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "bench/sweep.h"
#include "cli/gpu_launch.h"
#include "util/json.h"

#ifdef EPKIT_WITH_CUDA
#include "bench/nccl_runner.h"
#include "runtime/gpu_rank.h"
#endif

namespace epkit::cli {
namespace {

struct NcclBenchOptions {
  std::string collective;
  std::string min_bytes = "32M";
  std::string max_bytes = "32M";
  std::size_t factor = 2;
  int iters = 20;
  int warmup = 5;
  int check = 1;
  std::string type = "float";
  int root = 0;
  std::optional<double> min_busbw;
};

struct Parsed {
  bench::Collective kind;
  bench::DataType type;
  std::size_t min_bytes;
  std::size_t max_bytes;
};

Result<Parsed> parse(const NcclBenchOptions& o) {
  auto kind = bench::parse_collective(o.collective);
  if (!kind) return kind.error();
  auto type = bench::parse_type(o.type);
  if (!type) return type.error();
  auto lo = bench::parse_size(o.min_bytes);
  if (!lo) return lo.error();
  auto hi = bench::parse_size(o.max_bytes);
  if (!hi) return hi.error();
  // The sweep's own rules (-b <= -e, -f >= 2) checked once here, so a usage
  // error is said once by the command rather than by every rank it spawned.
  if (auto sweep = bench::size_sweep(*lo, *hi, o.factor, type->size, 1); !sweep) {
    return sweep.error();
  }
  return Parsed{*kind, *type, *lo, *hi};
}

#ifdef EPKIT_WITH_CUDA

int bench_rank(const host::Host& host, const runtime::LaunchInfo& launch, runtime::RankIo& io,
               const NcclBenchOptions& o, const GpuLaunchOptions& lo, const Parsed& p) {
  auto fail = [&](int code, const std::string& why) {
    io.line("FAIL: " + why);
    return code;
  };
  auto sizes = bench::size_sweep(p.min_bytes, p.max_bytes, o.factor, p.type.size,
                                 bench::element_granularity(p.kind, launch.world_size));
  if (!sizes) return fail(k_exit_usage, sizes.error().message);
  std::unique_ptr<runtime::GpuRank> joined;
  if (int rc = runtime::open_gpu_rank(host, launch, io, lo.timeout_s, joined);
      rc != runtime::k_gpu_ok)
    return rc;
  auto& r = *joined;
  bench::RunOptions ro;
  ro.kind = p.kind;
  ro.type = p.type;
  ro.sizes = *sizes;
  ro.iters = o.iters;
  ro.warmup = o.warmup;
  ro.check = o.check != 0;
  ro.root = o.root;
  ro.timeout_s = lo.timeout_s;
  const auto begin = std::chrono::steady_clock::now();
  if (launch.rank == 0) {
    ro.progress = [&](std::size_t done, std::size_t total) {
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
      if (s > 3.0 && done < total) {
        std::fprintf(stderr, "epkit bench: %zu of %zu sizes done (%.0f s)\n", done, total, s);
      }
    };
  }
  auto rows = bench::run_sweep(*r.session, r.store(), ro);
  if (!rows) {
    r.session->abort();
    return fail(runtime::exit_code_for(rows.error()), rows.error().message);
  }
  int code = runtime::k_gpu_ok;
  if (launch.rank == 0) {
    double avg = bench::average_busbw(*rows);
    std::uint64_t wrong = bench::total_wrong(*rows);
    if (wrong != 0) {
      code = runtime::k_gpu_wrong_data;
    } else if (o.min_busbw && avg < *o.min_busbw) {
      code = runtime::k_gpu_below_busbw;
    }
    const auto& f0 = r.facts.front();
    if (lo.json) {
      nlohmann::json j = {{"collective", bench::to_string(p.kind)},
                          {"nranks", launch.world_size},
                          {"nnodes", launch.nnodes},
                          {"nccl_version", f0.nccl_version},
                          {"gpu", r.gpu.name},
                          {"iters", o.iters},
                          {"warmup", o.warmup},
                          {"avg_busbw_gbps", avg},
                          {"wrong", wrong},
                          {"exit_code", code}};
      j["min_busbw_gbps"] = o.min_busbw ? nlohmann::json(*o.min_busbw) : nlohmann::json(nullptr);
      nlohmann::json rj = nlohmann::json::array();
      for (const auto& row : *rows) rj.push_back(bench::to_json(row));
      j["rows"] = rj;
      io.summary << util::dump_json(j, 2) << "\n";
    } else {
      io.summary << fmt::format(
          "# epkit bench nccl {}: {} ranks on {} node{}, NCCL {}, {}, -n {} -w {} -c {}\n",
          bench::to_string(p.kind), launch.world_size, launch.nnodes, launch.nnodes == 1 ? "" : "s",
          f0.nccl_version, r.gpu.name, o.iters, o.warmup, o.check);
      io.summary << bench::table_header();
      for (const auto& row : *rows) io.summary << bench::table_row(row);
      io.summary << bench::table_footer(*rows);
      if (o.min_busbw) {
        io.summary << fmt::format("# Min bus bandwidth    : {:.4f} {}\n", *o.min_busbw,
                                  avg < *o.min_busbw ? "FAILED" : "OK");
      }
    }
    io.summary.flush();
  }
  return runtime::close_gpu_rank(r, io, "bench/done", lo.timeout_s, code);
}

#endif

}  // namespace

BenchSubcommand add_bench_nccl(CLI::App& bench) {
  auto common = std::make_shared<CommonOptions>();
  auto lo = std::make_shared<GpuLaunchOptions>();
  auto o = std::make_shared<NcclBenchOptions>();
  CLI::App* nccl = bench.add_subcommand(
      "nccl", "all_reduce, all_gather, reduce_scatter, alltoall, sendrecv or broadcast");
  nccl->add_option("collective", o->collective, "The collective")->required();
  nccl->add_option("-b,--minbytes", o->min_bytes, "Smallest size (default 32M)");
  nccl->add_option("-e,--maxbytes", o->max_bytes, "Largest size (default 32M)");
  nccl->add_option("-f,--stepfactor", o->factor, "Size multiplier (default 2)");
  nccl->add_option("-n,--iters", o->iters, "Timed iterations (default 20)")
      ->check(CLI::Range(1, 1000000));
  nccl->add_option("-w,--warmup_iters,--warmup", o->warmup, "Warm-up iterations (default 5)")
      ->check(CLI::Range(0, 1000000));
  nccl->add_option("-c,--check", o->check, "Check the data (default 1)")->check(CLI::Range(0, 1));
  nccl->add_option("-d,--datatype", o->type, "float, double, int32 or int64");
  nccl->add_option("-r,--root", o->root, "Broadcast root (default 0)")
      ->check(CLI::Range(0, 1 << 20));
  nccl->add_option("--min-busbw", o->min_busbw,
                   "Exit 13 when the average bus bandwidth (GB/s) is below this")
      ->check(finite_range(0.0, 1e9));
  add_gpu_launch_options(*nccl, *lo);
  nccl->footer(
      "Exit codes: 0 OK, 10 wrong data, 11 NCCL/CUDA error, 12 no GPU/libnccl, "
      "13 below --min-busbw, 75 peer lost, 124 timeout, 64 usage.");
  return {nccl, [common, lo, o](Io& io) -> int {
            auto p = parse(*o);
            if (!p) return refuse_run(io, "bench nccl", lo->json, k_exit_usage, p.error().message);
            std::vector<std::string> child = {"nccl",      o->collective,
                                              "-b",        o->min_bytes,
                                              "-e",        o->max_bytes,
                                              "-f",        std::to_string(o->factor),
                                              "-n",        std::to_string(o->iters),
                                              "-w",        std::to_string(o->warmup),
                                              "-c",        std::to_string(o->check),
                                              "-d",        o->type,
                                              "-r",        std::to_string(o->root),
                                              "--timeout", fmt::format("{}", lo->timeout_s)};
            if (lo->json) child.push_back("--json");
            if (o->min_busbw) {
              child.push_back("--min-busbw");
              child.push_back(fmt::format("{}", *o->min_busbw));
            }
            RankMain main;
#ifdef EPKIT_WITH_CUDA
            Parsed parsed = *p;
            main = [o, lo, parsed](const host::Host& h, const runtime::LaunchInfo& l,
                                   runtime::RankIo& rio) {
              return bench_rank(h, l, rio, *o, *lo, parsed);
            };
#endif
            return run_gpu_command(io, "bench", *common, *lo, child, main);
          }};
}

}  // namespace epkit::cli
