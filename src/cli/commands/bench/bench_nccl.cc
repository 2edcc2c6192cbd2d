// `epkit bench nccl`'s flags and its summary (nccl-tests' table or JSON);
// each rank's work is the bench layer's (bench/nccl_rank.h).
#include "cli/commands/bench/bench_nccl.h"

#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "bench/sweep.h"
#include "cli/gpu_launch.h"
#include "util/json.h"

#ifdef EPKIT_WITH_CUDA
#include "bench/nccl_rank.h"
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

// Rank 0's summary: nccl-tests' table, or with --json one JSON document.
void write_summary(const bench::NcclBenchSummary& s, const NcclBenchOptions& o, const Parsed& p,
                   bool json, std::ostream& out) {
  const runtime::GpuRank& r = s.rank;
  const auto& launch = r.launch;
  const auto& f0 = r.facts.front();
  if (json) {
    nlohmann::json j = {{"collective", bench::to_string(p.kind)},
                        {"nranks", launch.world_size},
                        {"nnodes", launch.nnodes},
                        {"nccl_version", f0.nccl_version},
                        {"gpu", r.gpu.name},
                        {"iters", o.iters},
                        {"warmup", o.warmup},
                        {"avg_busbw_gbps", s.avg_busbw},
                        {"wrong", s.wrong},
                        {"exit_code", s.code}};
    j["min_busbw_gbps"] = o.min_busbw ? nlohmann::json(*o.min_busbw) : nlohmann::json(nullptr);
    nlohmann::json rj = nlohmann::json::array();
    for (const auto& row : s.rows) rj.push_back(bench::to_json(row));
    j["rows"] = rj;
    out << util::dump_json(j, 2) << "\n";
  } else {
    out << fmt::format(
        "# epkit bench nccl {}: {} ranks on {} node{}, NCCL {}, {}, -n {} -w {} -c {}\n",
        bench::to_string(p.kind), launch.world_size, launch.nnodes, launch.nnodes == 1 ? "" : "s",
        f0.nccl_version, r.gpu.name, o.iters, o.warmup, o.check);
    out << bench::table_header();
    for (const auto& row : s.rows) out << bench::table_row(row);
    out << bench::table_footer(s.rows);
    if (o.min_busbw) {
      out << fmt::format("# Min bus bandwidth    : {:.4f} {}\n", *o.min_busbw,
                         s.avg_busbw < *o.min_busbw ? "FAILED" : "OK");
    }
  }
  out.flush();
}

bench::NcclBenchRankOptions rank_options(const NcclBenchOptions& o, const Parsed& p,
                                         double timeout_s) {
  bench::NcclBenchRankOptions r;
  r.kind = p.kind;
  r.type = p.type;
  r.min_bytes = p.min_bytes;
  r.max_bytes = p.max_bytes;
  r.factor = o.factor;
  r.iters = o.iters;
  r.warmup = o.warmup;
  r.check = o.check != 0;
  r.root = o.root;
  r.min_busbw = o.min_busbw;
  r.timeout_s = timeout_s;
  // Said only once the sweep is slow enough for someone to wonder.
  r.progress = [](std::size_t done, std::size_t total, double seconds) {
    if (seconds > 3.0 && done < total) {
      std::fprintf(stderr, "epkit bench: %zu of %zu sizes done (%.0f s)\n", done, total, seconds);
    }
  };
  return r;
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
            main = [o, json = lo->json, parsed = *p, ro = rank_options(*o, *p, lo->timeout_s)](
                       const host::Host& h, const runtime::LaunchInfo& l, runtime::RankIo& rio) {
              return bench::run_nccl_bench_rank(
                  h, l, rio, ro, [&](const bench::NcclBenchSummary& summary) {
                    write_summary(summary, *o, parsed, json, rio.summary);
                  });
            };
#endif
            return run_gpu_command(io, "bench", *common, *lo, child, main);
          }};
}

}  // namespace epkit::cli
