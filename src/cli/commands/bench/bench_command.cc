// epkit bench nccl <collective>: nccl-tests' flags, table and bus-bandwidth
// factors, with a data check on every GPU and a --min-busbw pass/fail exit.
// epkit bench ep: DeepEP's test_intranode.py tuning run for the EP engine
// (test_internode.py's RDMA and NVL figures when the launch spans nodes).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench/ep_bench.h"
#include "bench/ep_bench_low_latency.h"
#include "bench/p2p.h"
#include "bench/sweep.h"
#include "cli/command.h"
#include "cli/gpu_launch.h"
#include "host/dl/nccl.h"
#include "util/json.h"

#ifdef EPKIT_WITH_CUDA
#include "bench/nccl_runner.h"
#include "cli/node_nics.h"
#include "ep_harness/bench/low_latency_run.h"
#include "ep_harness/bench/run.h"
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

int bench_rank(const host::Host& host, const runtime::LaunchInfo& launch, RankIo& io,
               const NcclBenchOptions& o, const GpuLaunchOptions& lo, const Parsed& p) {
  auto fail = [&](int code, const std::string& why) {
    io.line("FAIL: " + why);
    return code;
  };
  auto sizes = bench::size_sweep(p.min_bytes, p.max_bytes, o.factor, p.type.size,
                                 bench::element_granularity(p.kind, launch.world_size));
  if (!sizes) return fail(k_exit_usage, sizes.error().message);
  std::unique_ptr<runtime::GpuRank> joined;
  if (int rc = open_gpu_rank(host, launch, io, lo.timeout_s, joined); rc != k_gpu_ok) return rc;
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
    return fail(exit_code_for(rows.error()), rows.error().message);
  }
  int code = k_gpu_ok;
  if (launch.rank == 0) {
    double avg = bench::average_busbw(*rows);
    std::uint64_t wrong = bench::total_wrong(*rows);
    if (wrong != 0) {
      code = k_gpu_wrong_data;
    } else if (o.min_busbw && avg < *o.min_busbw) {
      code = k_gpu_below_busbw;
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
  return close_gpu_rank(r, io, "bench/done", lo.timeout_s, code);
}

#endif

struct EpBenchCliOptions {
  /// "normal" (DeepEP's test_intranode.py) or "low-latency"
  /// (test_low_latency.py).
  std::string mode = "normal";
  int tokens = 4096;
  int hidden = 7168;
  int topk = 8;
  int experts = 256;
  std::vector<int> sms{24};
  std::vector<int> chunks{1, 2, 4, 8};
  int warmup = 20;
  int iters = 50;
  std::uint64_t seed = 0;
  std::string dump;
};

// The checks CLI11 cannot express on lists, and the shape rules the engine
// and DeepEP's FP8 cast share. "" when fine.
std::string validate(const EpBenchCliOptions& o) {
  if (o.hidden % 128 != 0) {
    return fmt::format("--hidden {}: must be a multiple of 128 (one FP8 scale per 128 channels)",
                       o.hidden);
  }
  const bool ll = o.mode == "low-latency";
  if (ll && o.sms.size() != 1) {
    return "--mode low-latency takes one --sms value (the kernels' blocks)";
  }
  if (ll && !o.dump.empty()) return "--dump is for --mode normal";
  if (o.topk > o.experts) {
    return fmt::format("--topk {} is more than --experts {}", o.topk, o.experts);
  }
  for (int s : o.sms) {
    if (s < 1 || s > 1024) return fmt::format("--sms {}: must be 1..1024", s);
  }
  for (int c : o.chunks) {
    if (c != 1 && c != 2 && c != 4 && c != 8) {
      return fmt::format("--chunks {}: the NVL chunk must be 1, 2, 4 or 8", c);
    }
  }
  if (o.sms.empty() || o.chunks.empty()) return "--sms and --chunks need at least one value";
  return "";
}

#ifdef EPKIT_WITH_CUDA

// The engine says unavailable when this node cannot run it (no peer access
// between the GPUs, for one): that is exit 12, not a lost peer. Invalid is a
// shape the launch cannot take (nodes of unequal size, more than 8 ranks on
// a node, SMs the low-latency kernels cannot have): the user's flags.
int buffer_exit_code(const Error& e) {
  return e.code == ErrorCode::unavailable ? k_gpu_unavailable
         : e.code == ErrorCode::invalid   ? k_exit_usage
                                          : exit_code_for(e);
}

/// What both modes do before their Buffer: the experts must split over the
/// ranks, then the rank joins the job.
int join_ep_bench_rank(const host::Host& host, const runtime::LaunchInfo& launch, RankIo& io,
                       const EpBenchCliOptions& o, const GpuLaunchOptions& lo,
                       std::unique_ptr<runtime::GpuRank>& joined) {
  if (o.experts % launch.world_size != 0) {
    io.line(fmt::format("FAIL: --experts {} does not split evenly over {} ranks", o.experts,
                        launch.world_size));
    return k_exit_usage;
  }
  return open_gpu_rank(host, launch, io, lo.timeout_s, joined);
}

/// What both modes do after their run: every rank's failed checks, a barrier
/// (no rank frees its share while another may still read it), `after_free`,
/// then rank 0's summary.
template <typename Report, typename Json, typename Render>
int end_ep_bench_rank(runtime::GpuRank& r, const runtime::LaunchInfo& launch, RankIo& io,
                      const GpuLaunchOptions& lo, std::unique_ptr<ep::Buffer>& buffer,
                      const Report& report, const std::function<void()>& after_free, Json json,
                      Render render) {
  for (const auto& f : report.local_failures) io.line("FAIL: check " + f);
  const int code = report.checks_passed() ? k_gpu_ok : k_gpu_wrong_data;
  if (auto done = buffer->barrier(); !done) {
    r.session->abort();
    io.line("FAIL: " + done.error().message);
    return exit_code_for(done.error());
  }
  buffer.reset();
  if (after_free) after_free();
  if (launch.rank == 0) {
    if (lo.json) {
      io.summary << util::dump_json(json(report, code), 2) << "\n";
    } else {
      io.summary << render(report);
    }
    io.summary.flush();
  }
  return close_gpu_rank(r, io, "bench/done", lo.timeout_s, code);
}

int bench_ep_rank(const host::Host& host, const runtime::LaunchInfo& launch, RankIo& io,
                  const EpBenchCliOptions& o, const GpuLaunchOptions& lo) {
  auto fail = [&](int code, const std::string& why) {
    io.line("FAIL: " + why);
    return code;
  };
  std::unique_ptr<runtime::GpuRank> joined;
  if (int rc = join_ep_bench_rank(host, launch, io, o, lo, joined); rc != k_gpu_ok) return rc;
  auto& r = *joined;
  harness::EpBenchOptions eo;
  eo.shape = {o.tokens, o.hidden, o.topk, o.experts, launch.world_size};
  eo.sms = o.sms;
  eo.chunks = o.chunks;
  eo.warmup = o.warmup;
  eo.iters = o.iters;
  eo.seed = o.seed;
  eo.dump_dir = o.dump;
  eo.timeout_s = lo.timeout_s;
  const auto begin = std::chrono::steady_clock::now();
  eo.progress = [begin](bench::EpOp op, int sms) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    if (s > 3.0) {
      std::fprintf(stderr, "epkit bench ep: %s at %d SMs timed (%.0f s)\n", bench::to_string(op),
                   sms, s);
    }
  };
  // Across nodes: the NIC each GPU should use, before the traffic, and the
  // counters judged after it (one watcher per node), as `test ep` does.
  auto nics = start_node_nic_watch(host, launch, r, io);
  auto buffer = harness::make_ep_buffer(r, eo);
  if (!buffer) {
    r.session->abort();
    return fail(buffer_exit_code(buffer.error()), "ep::Buffer::create: " + buffer.error().message);
  }
  auto report = harness::run_ep_bench(r, **buffer, eo);
  if (!report) {
    r.session->abort();
    return fail(exit_code_for(report.error()), report.error().message);
  }
  auto finish_nics = [&] {
    if (nics)
      for (const auto& l : nics->finish().lines) io.line(l);
  };
  return end_ep_bench_rank(
      r, launch, io, lo, *buffer, *report, finish_nics,
      [](const auto& rep, int code) { return bench::ep_report_json(rep, code); },
      [](const auto& rep) { return bench::render_ep_report(rep); });
}

int bench_ep_low_latency_rank(const host::Host& host, const runtime::LaunchInfo& launch, RankIo& io,
                              const EpBenchCliOptions& o, const GpuLaunchOptions& lo) {
  auto fail = [&](int code, const std::string& why) {
    io.line("FAIL: " + why);
    return code;
  };
  std::unique_ptr<runtime::GpuRank> joined;
  if (int rc = join_ep_bench_rank(host, launch, io, o, lo, joined); rc != k_gpu_ok) return rc;
  auto& r = *joined;
  harness::EpLowLatencyBenchOptions eo;
  eo.shape = {o.tokens, o.hidden, o.topk, o.experts, launch.world_size};
  eo.sms = o.sms.front();
  eo.warmup = o.warmup;
  eo.iters = o.iters;
  eo.seed = o.seed;
  eo.timeout_s = lo.timeout_s;
  auto buffer = harness::make_ep_low_latency_buffer(r, eo);
  if (!buffer) {
    r.session->abort();
    return fail(buffer_exit_code(buffer.error()), "ep::Buffer::create: " + buffer.error().message);
  }
  auto report = harness::run_ep_low_latency_bench(r, **buffer, eo);
  if (!report) {
    r.session->abort();
    const Error& e = report.error();
    // A shape or SM count the low-latency kernels refuse is the user's flags.
    return fail(e.code == ErrorCode::invalid ? k_exit_usage : exit_code_for(e), e.message);
  }
  return end_ep_bench_rank(
      r, launch, io, lo, *buffer, *report, {},
      [](const auto& rep, int code) { return bench::ep_low_latency_report_json(rep, code); },
      [](const auto& rep) { return bench::render_ep_low_latency_report(rep); });
}

#endif

// --dump DIR made absolute, if it can be made: every part that exists is a
// folder, and the deepest one is writable. Creates nothing.
Result<std::string> dump_folder(const std::string& given) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::absolute(given, ec);
  if (ec) return make_error(ErrorCode::invalid, fmt::format("{}: {}", given, ec.message()));
  dir = dir.lexically_normal();
  fs::path existing = dir;
  while (true) {
    auto status = fs::status(existing, ec);
    if (status.type() != fs::file_type::not_found) {
      if (status.type() != fs::file_type::directory) {
        return make_error(ErrorCode::invalid, fmt::format("{}: {} exists and is not a folder",
                                                          given, existing.string()));
      }
      break;
    }
    if (!existing.has_relative_path()) break;
    existing = existing.parent_path();
  }
  if (::access(existing.c_str(), W_OK | X_OK) != 0) {
    return make_error(ErrorCode::permission,
                      fmt::format("{}: cannot write in {}", given, existing.string()));
  }
  return dir.string();
}

int run_ep_command(Io& io, const CommonOptions& common, const GpuLaunchOptions& lo,
                   const std::shared_ptr<EpBenchCliOptions>& o) {
  if (std::string why = validate(*o); !why.empty()) {
    return refuse_run(io, "bench ep", lo.json, k_exit_usage, why);
  }
  if (!o->dump.empty()) {
    // Checked here, so that a bad path is a usage error before any GPU
    // starts, but not made: the ranks make it once the run is under way (a
    // run that cannot start leaves no folders behind). Ranks get it absolute
    // whatever their working directory.
    auto dir = dump_folder(o->dump);
    if (!dir) {
      return refuse_run(io, "bench ep", lo.json, k_exit_usage, "--dump " + dir.error().message);
    }
    o->dump = *dir;
  }
  std::vector<std::string> child = {"ep", "--mode", o->mode};
  auto pass = [&child](const char* flag, std::string value) {
    child.push_back(flag);
    child.push_back(std::move(value));
  };
  pass("--tokens", std::to_string(o->tokens));
  pass("--hidden", std::to_string(o->hidden));
  pass("--topk", std::to_string(o->topk));
  pass("--experts", std::to_string(o->experts));
  pass("--sms", fmt::format("{}", fmt::join(o->sms, ",")));
  pass("--chunks", fmt::format("{}", fmt::join(o->chunks, ",")));
  pass("--warmup", std::to_string(o->warmup));
  pass("--iters", std::to_string(o->iters));
  pass("--seed", std::to_string(o->seed));
  pass("--timeout", fmt::format("{}", lo.timeout_s));
  if (lo.json) child.push_back("--json");
  if (!o->dump.empty()) pass("--dump", o->dump);
  RankMain main;
#ifdef EPKIT_WITH_CUDA
  GpuLaunchOptions launch = lo;
  main = [o, launch](const host::Host& h, const runtime::LaunchInfo& l, RankIo& rio) {
    if (o->mode == "low-latency") return bench_ep_low_latency_rank(h, l, rio, *o, launch);
    return bench_ep_rank(h, l, rio, *o, launch);
  };
#endif
  return run_gpu_command(io, "bench", common, lo, child, main);
}

int run_p2p_command(Io& io, const std::string& size, int iters, bool json) {
  auto bytes = bench::parse_size(size);
  if (!bytes) return refuse_run(io, "bench p2p", json, k_exit_usage, bytes.error().message);
  if (*bytes < 16) {
    return refuse_run(io, "bench p2p", json, k_exit_usage, "-b must be at least 16 bytes");
  }
#ifdef EPKIT_WITH_CUDA
  bench::P2pOptions po;
  po.bytes = *bytes / 16 * 16;
  po.iters = iters;
  auto matrices = bench::run_p2p(po);
  if (!matrices) {
    return refuse_run(
        io, "bench p2p", json,
        matrices.error().code == ErrorCode::unavailable ? k_gpu_unavailable : k_gpu_nccl_error,
        matrices.error().message);
  }
  if (json) {
    nlohmann::json j = {{"bytes", po.bytes}, {"iters", po.iters}};
    nlohmann::json ms = nlohmann::json::array();
    for (const auto& m : *matrices)
      ms.push_back({{"mode", bench::to_string(m.mode)}, {"gbps", m.gbps}});
    j["matrices"] = ms;
    io.out << util::dump_json(j, 2) << "\n";
  } else {
    io.out << fmt::format("epkit bench p2p: {} bytes per copy, {} iterations\n\n", po.bytes,
                          po.iters);
    for (const auto& m : *matrices) io.out << bench::render_p2p(m) << "\n";
  }
  return k_gpu_ok;
#else
  (void)iters;
  return refuse_run(io, "bench p2p", json, k_gpu_unavailable, host::dl::nccl_not_built().message);
#endif
}

}  // namespace

Command make_bench_command() {
  return {
      "bench", "GPU benchmarks: NCCL collectives (nccl-tests' table)", [](CLI::App& app) -> Runner {
        auto common = std::make_shared<CommonOptions>();
        auto lo = std::make_shared<GpuLaunchOptions>();
        auto o = std::make_shared<NcclBenchOptions>();
        app.require_subcommand(1);
        CLI::App* nccl = app.add_subcommand(
            "nccl", "all_reduce, all_gather, reduce_scatter, alltoall, sendrecv or broadcast");
        nccl->add_option("collective", o->collective, "The collective")->required();
        nccl->add_option("-b,--minbytes", o->min_bytes, "Smallest size (default 32M)");
        nccl->add_option("-e,--maxbytes", o->max_bytes, "Largest size (default 32M)");
        nccl->add_option("-f,--stepfactor", o->factor, "Size multiplier (default 2)");
        nccl->add_option("-n,--iters", o->iters, "Timed iterations (default 20)")
            ->check(CLI::Range(1, 1000000));
        nccl->add_option("-w,--warmup_iters", o->warmup, "Warm-up iterations (default 5)")
            ->check(CLI::Range(0, 1000000));
        nccl->add_option("-c,--check", o->check, "Check the data (default 1)")
            ->check(CLI::Range(0, 1));
        nccl->add_option("-d,--datatype", o->type, "float, double, int32 or int64");
        nccl->add_option("-r,--root", o->root, "Broadcast root (default 0)")
            ->check(CLI::Range(0, 1 << 20));
        nccl->add_option("--min-busbw", o->min_busbw,
                         "Exit 13 when the average bus bandwidth (GB/s) is below this")
            ->check(finite_range(0.0, 1e9));
        add_gpu_launch_options(*nccl, *lo);
        CLI::App* p2p = app.add_subcommand(
            "p2p", "GPU x GPU copy bandwidth matrix: copy engine and SM kernel, uni/bidirectional");
        auto p2p_size = std::make_shared<std::string>("256M");
        auto p2p_iters = std::make_shared<int>(10);
        auto p2p_json = std::make_shared<bool>(false);
        p2p->add_option("-b,--bytes", *p2p_size, "Bytes per copy (default 256M)");
        p2p->add_option("-n,--iters", *p2p_iters, "Timed copies per pair (default 10)")
            ->check(CLI::Range(1, 100000));
        p2p->add_flag("--json", *p2p_json, "Write the matrices as JSON");
        nccl->footer(
            "Exit codes: 0 OK, 10 wrong data, 11 NCCL/CUDA error, 12 no GPU/libnccl, "
            "13 below --min-busbw, 75 peer lost, 124 timeout, 64 usage.");
        CLI::App* ep = app.add_subcommand(
            "ep", "EP engine: checks against the reference, then DeepEP's tuning sweep");
        auto eo = std::make_shared<EpBenchCliOptions>();
        auto ep_lo = std::make_shared<GpuLaunchOptions>();
        ep->add_option("--mode", eo->mode,
                       "normal (DeepEP's test_intranode.py) or low-latency "
                       "(test_low_latency.py; default normal)")
            ->check(CLI::IsMember({"normal", "low-latency"}));
        CLI::Option* tokens = ep->add_option("--tokens", eo->tokens,
                                             "Tokens per rank (default 4096; low-latency 128)")
                                  ->check(CLI::Range(1, 1 << 20));
        ep->add_option("--hidden", eo->hidden, "Hidden size, a multiple of 128 (default 7168)")
            ->check(CLI::Range(128, 1 << 16));
        ep->add_option("--topk", eo->topk, "Experts per token (default 8)")
            ->check(CLI::Range(1, 1024));
        CLI::Option* experts = ep->add_option("--experts", eo->experts,
                                              "Experts in all (default 256; low-latency 288)")
                                   ->check(CLI::Range(1, 1 << 16));
        ep->add_option("--sms", eo->sms,
                       "SM counts to sweep: --sms 24,12 or repeated (default 24); low-latency: "
                       "one value, the kernels' blocks (ranks sharing a GPU: sms x ranks <= "
                       "its SMs)")
            ->delimiter(',');
        ep->add_option("--chunks", eo->chunks, "NVL chunks to sweep (default 1,2,4,8)")
            ->delimiter(',');
        ep->add_option("--warmup", eo->warmup, "Untimed calls per configuration (default 20)")
            ->check(CLI::Range(0, 1000000));
        ep->add_option("--iters", eo->iters, "Timed calls per configuration (default 50)")
            ->check(CLI::Range(1, 1000000));
        ep->add_option("--seed", eo->seed, "Seed of the random inputs (default 0)");
        ep->add_option("--dump", eo->dump,
                       "Write every rank's inputs and outputs as .npy under this folder");
        add_gpu_launch_options(*ep, *ep_lo);
        ep->footer(
            "Exit codes: 0 OK, 10 the engine differs from the reference, 11 NCCL/CUDA error, "
            "12 no GPU/libnccl or the engine cannot run here, 75 peer lost, 124 timeout, "
            "64 usage.");
        return [common, lo, o, p2p, p2p_size, p2p_iters, p2p_json, ep, eo, ep_lo, tokens,
                experts](Io& io) -> int {
          if (p2p->parsed()) return run_p2p_command(io, *p2p_size, *p2p_iters, *p2p_json);
          if (ep->parsed()) {
            // DeepEP's test_low_latency.py sizes, unless given.
            if (eo->mode == "low-latency") {
              if (tokens->count() == 0) eo->tokens = bench::EpLowLatencyShape{}.tokens;
              if (experts->count() == 0) eo->experts = bench::EpLowLatencyShape{}.experts;
            }
            return run_ep_command(io, *common, *ep_lo, eo);
          }
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
          main = [o, lo, parsed](const host::Host& h, const runtime::LaunchInfo& l, RankIo& rio) {
            return bench_rank(h, l, rio, *o, *lo, parsed);
          };
#endif
          return run_gpu_command(io, "bench", *common, *lo, child, main);
        };
      }};
}

}  // namespace epkit::cli
