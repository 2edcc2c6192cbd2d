// The per-rank body (bench_ep_rank, bench_ep_low_latency_rank) stays here until the
// harness takes the EP bench's rank code.
#include "cli/commands/bench/bench_ep.h"

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
#include "cli/gpu_launch.h"
#include "util/json.h"

#ifdef EPKIT_WITH_CUDA
#include "ep_harness/bench/low_latency_run.h"
#include "ep_harness/bench/run.h"
#include "ep_harness/node_nics.h"
#include "runtime/gpu_rank.h"
#endif

namespace epkit::cli {
namespace {

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
  return e.code == ErrorCode::unavailable ? runtime::k_gpu_unavailable
         : e.code == ErrorCode::invalid   ? k_exit_usage
                                          : runtime::exit_code_for(e);
}

/// What both modes do before their Buffer: the experts must split over the
/// ranks, then the rank joins the job.
int join_ep_bench_rank(const host::Host& host, const runtime::LaunchInfo& launch,
                       runtime::RankIo& io, const EpBenchCliOptions& o, const GpuLaunchOptions& lo,
                       std::unique_ptr<runtime::GpuRank>& joined) {
  if (o.experts % launch.world_size != 0) {
    io.line(fmt::format("FAIL: --experts {} does not split evenly over {} ranks", o.experts,
                        launch.world_size));
    return k_exit_usage;
  }
  return runtime::open_gpu_rank(host, launch, io, lo.timeout_s, joined);
}

/// What both modes do after their run: every rank's failed checks, a barrier
/// (no rank frees its share while another may still read it), `after_free`,
/// then rank 0's summary.
template <typename Report, typename Json, typename Render>
int end_ep_bench_rank(runtime::GpuRank& r, const runtime::LaunchInfo& launch, runtime::RankIo& io,
                      const GpuLaunchOptions& lo, std::unique_ptr<ep::Buffer>& buffer,
                      const Report& report, const std::function<void()>& after_free, Json json,
                      Render render) {
  for (const auto& f : report.local_failures) io.line("FAIL: check " + f);
  const int code = report.checks_passed() ? runtime::k_gpu_ok : runtime::k_gpu_wrong_data;
  if (auto done = buffer->barrier(); !done) {
    r.session->abort();
    io.line("FAIL: " + done.error().message);
    return runtime::exit_code_for(done.error());
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
  return runtime::close_gpu_rank(r, io, "bench/done", lo.timeout_s, code);
}

int bench_ep_rank(const host::Host& host, const runtime::LaunchInfo& launch, runtime::RankIo& io,
                  const EpBenchCliOptions& o, const GpuLaunchOptions& lo) {
  auto fail = [&](int code, const std::string& why) {
    io.line("FAIL: " + why);
    return code;
  };
  std::unique_ptr<runtime::GpuRank> joined;
  if (int rc = join_ep_bench_rank(host, launch, io, o, lo, joined); rc != runtime::k_gpu_ok)
    return rc;
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
  auto nics = harness::start_node_nic_watch(host, launch, r, io);
  auto buffer = harness::make_ep_buffer(r, eo);
  if (!buffer) {
    r.session->abort();
    return fail(buffer_exit_code(buffer.error()), "ep::Buffer::create: " + buffer.error().message);
  }
  auto report = harness::run_ep_bench(r, **buffer, eo);
  if (!report) {
    r.session->abort();
    return fail(runtime::exit_code_for(report.error()), report.error().message);
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

int bench_ep_low_latency_rank(const host::Host& host, const runtime::LaunchInfo& launch,
                              runtime::RankIo& io, const EpBenchCliOptions& o,
                              const GpuLaunchOptions& lo) {
  auto fail = [&](int code, const std::string& why) {
    io.line("FAIL: " + why);
    return code;
  };
  std::unique_ptr<runtime::GpuRank> joined;
  if (int rc = join_ep_bench_rank(host, launch, io, o, lo, joined); rc != runtime::k_gpu_ok)
    return rc;
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
    return fail(e.code == ErrorCode::invalid ? k_exit_usage : runtime::exit_code_for(e), e.message);
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
  pass("-w", std::to_string(o->warmup));
  pass("-n", std::to_string(o->iters));
  pass("--seed", std::to_string(o->seed));
  pass("--timeout", fmt::format("{}", lo.timeout_s));
  if (lo.json) child.push_back("--json");
  if (!o->dump.empty()) pass("--dump", o->dump);
  RankMain main;
#ifdef EPKIT_WITH_CUDA
  GpuLaunchOptions launch = lo;
  main = [o, launch](const host::Host& h, const runtime::LaunchInfo& l, runtime::RankIo& rio) {
    if (o->mode == "low-latency") return bench_ep_low_latency_rank(h, l, rio, *o, launch);
    return bench_ep_rank(h, l, rio, *o, launch);
  };
#endif
  return run_gpu_command(io, "bench", common, lo, child, main);
}

}  // namespace

BenchSubcommand add_bench_ep(CLI::App& bench) {
  CLI::App* ep = bench.add_subcommand(
      "ep", "EP engine: checks against the reference, then DeepEP's tuning sweep");
  auto common = std::make_shared<CommonOptions>();
  auto eo = std::make_shared<EpBenchCliOptions>();
  auto lo = std::make_shared<GpuLaunchOptions>();
  ep->add_option("--mode", eo->mode,
                 "normal (DeepEP's test_intranode.py) or low-latency "
                 "(test_low_latency.py; default normal)")
      ->check(CLI::IsMember({"normal", "low-latency"}));
  CLI::Option* tokens =
      ep->add_option("--tokens", eo->tokens, "Tokens per rank (default 4096; low-latency 128)")
          ->check(CLI::Range(1, 1 << 20));
  ep->add_option("--hidden", eo->hidden, "Hidden size, a multiple of 128 (default 7168)")
      ->check(CLI::Range(128, 1 << 16));
  ep->add_option("--topk", eo->topk, "Experts per token (default 8)")->check(CLI::Range(1, 1024));
  CLI::Option* experts =
      ep->add_option("--experts", eo->experts, "Experts in all (default 256; low-latency 288)")
          ->check(CLI::Range(1, 1 << 16));
  ep->add_option("--sms", eo->sms,
                 "SM counts to sweep: --sms 24,12 or repeated (default 24); low-latency: "
                 "one value, the kernels' blocks (ranks sharing a GPU: sms x ranks <= "
                 "its SMs)")
      ->delimiter(',');
  ep->add_option("--chunks", eo->chunks, "NVL chunks to sweep (default 1,2,4,8)")->delimiter(',');
  // nccl-tests' spelling (-w, -n), as `bench nccl` and `bench p2p` take it;
  // --warmup stays for scripts written before.
  ep->add_option("-w,--warmup_iters,--warmup", eo->warmup,
                 "Untimed calls per configuration (default 20)")
      ->check(CLI::Range(0, 1000000));
  ep->add_option("-n,--iters", eo->iters, "Timed calls per configuration (default 50)")
      ->check(CLI::Range(1, 1000000));
  ep->add_option("--seed", eo->seed, "Seed of the random inputs (default 0)");
  ep->add_option("--dump", eo->dump,
                 "Write every rank's inputs and outputs as .npy under this folder");
  add_gpu_launch_options(*ep, *lo);
  ep->footer(
      "Exit codes: 0 OK, 10 the engine differs from the reference, 11 NCCL/CUDA error, "
      "12 no GPU/libnccl or the engine cannot run here, 75 peer lost, 124 timeout, "
      "64 usage.");
  return {ep, [common, lo, eo, tokens, experts](Io& io) -> int {
            // DeepEP's test_low_latency.py sizes, unless given.
            if (eo->mode == "low-latency") {
              if (tokens->count() == 0) eo->tokens = bench::EpLowLatencyShape{}.tokens;
              if (experts->count() == 0) eo->experts = bench::EpLowLatencyShape{}.experts;
            }
            return run_ep_command(io, *common, *lo, eo);
          }};
}

}  // namespace epkit::cli
