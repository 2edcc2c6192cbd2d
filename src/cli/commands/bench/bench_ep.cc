// `epkit bench ep`'s flags and its summary; each rank's work is the EP
// harness's (ep_harness/bench/rank.h).
#include "cli/commands/bench/bench_ep.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench/ep_bench.h"
#include "bench/ep_bench_low_latency.h"
#include "cli/gpu_launch.h"
#include "util/json.h"

#ifdef EPKIT_WITH_CUDA
#include "ep_harness/bench/rank.h"
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
  std::string network_leg = "nccl";  // low-latency across nodes: or "emulated"
  double nic_gbps = 50;
  double nic_latency_us = 2;
};

// The checks CLI11 cannot express on lists, and the shape rules the engine
// and DeepEP's FP8 cast share. "" when fine.
std::string validate(const EpBenchCliOptions& o) {
  if (o.hidden % 128 != 0) {
    return fmt::format("--hidden {}: must be a multiple of 128 (one FP8 scale per 128 channels)",
                       o.hidden);
  }
  const bool low_latency = o.mode == "low-latency";
  if (low_latency && o.sms.size() != 1) {
    return "--mode low-latency takes one --sms value (the kernels' blocks)";
  }
  if (low_latency && !o.dump.empty()) return "--dump is for --mode normal";
  if (!low_latency && o.network_leg != "nccl")
    return "--network-leg is for --mode low-latency (normal mode across nodes: epkit test ep)";
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

// Rank 0's summary: the table, or with --json one JSON document.
void write_summary(const harness::EpBenchSummary& s, bool json, std::ostream& out) {
  if (s.normal != nullptr) {
    if (json) {
      out << util::dump_json(bench::ep_report_json(*s.normal, s.code), 2) << "\n";
    } else {
      out << bench::render_ep_report(*s.normal);
    }
  } else if (s.low_latency != nullptr) {
    if (json) {
      out << util::dump_json(bench::ep_low_latency_report_json(*s.low_latency, s.code), 2) << "\n";
    } else {
      out << bench::render_ep_low_latency_report(*s.low_latency);
    }
  }
  out.flush();
}

harness::EpBenchRankOptions rank_options(const EpBenchCliOptions& o, const GpuLaunchOptions& lo) {
  harness::EpBenchRankOptions r;
  r.mode =
      o.mode == "low-latency" ? harness::EpBenchMode::low_latency : harness::EpBenchMode::normal;
  r.tokens = o.tokens;
  r.hidden = o.hidden;
  r.topk = o.topk;
  r.experts = o.experts;
  r.sms = o.sms;
  r.chunks = o.chunks;
  r.warmup = o.warmup;
  r.iters = o.iters;
  r.seed = o.seed;
  r.dump_dir = o.dump;
  r.timeout_s = lo.timeout_s;
  r.emulated_nic = o.network_leg == "emulated";
  r.nic_gbps = o.nic_gbps;
  r.nic_latency_us = o.nic_latency_us;
  // Said only once the sweep is slow enough for someone to wonder.
  r.progress = [](bench::EpOp op, int sms, double seconds) {
    if (seconds > 3.0) {
      std::fprintf(stderr, "epkit bench ep: %s at %d SMs timed (%.0f s)\n", bench::to_string(op),
                   sms, seconds);
    }
  };
  return r;
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
  if (o->network_leg != "nccl") {
    pass("--network-leg", o->network_leg);
    pass("--nic-gbps", fmt::format("{}", o->nic_gbps));
    pass("--nic-latency-us", fmt::format("{}", o->nic_latency_us));
  }
  if (lo.json) child.push_back("--json");
  if (!o->dump.empty()) pass("--dump", o->dump);
  RankMain main;
#ifdef EPKIT_WITH_CUDA
  main = [ro = rank_options(*o, lo), json = lo.json](
             const host::Host& h, const runtime::LaunchInfo& l, runtime::RankIo& rio) {
    return harness::run_ep_bench_rank(h, l, rio, ro, [&rio, json](const auto& summary) {
      write_summary(summary, json, rio.summary);
    });
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
  ep->add_option("--network-leg", eo->network_leg,
                 "Low-latency mode across nodes: nccl (default; NCCL's host API cannot carry "
                 "it, the engine says so) or emulated (the device-driven leg over an emulated "
                 "NIC, for nodes faked on one host's GPUs)")
      ->check(CLI::IsMember({"nccl", "emulated"}));
  ep->add_option("--nic-gbps", eo->nic_gbps, "The emulated NIC's cap per rank in GB/s (default 50)")
      ->check(CLI::Range(0.001, 10000.0));
  ep->add_option("--nic-latency-us", eo->nic_latency_us,
                 "The emulated NIC's latency in us (default 2)")
      ->check(CLI::Range(0.0, 1e6));
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
