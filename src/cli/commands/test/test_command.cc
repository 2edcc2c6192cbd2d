// epkit test: proves every GPU of the job can talk to every other within a
// bounded time. Per rank the runtime's connectivity test
// (runtime/connectivity.h: a checked all-reduce, a ring send/recv with a
// checked payload and a barrier); this prints "[host:rank] OK" or the reason,
// and rank 0 summarises versions and the transport NCCL chose per peer.
//
// epkit test ep: the EP engine's conformance suite, each rank's run being the
// harness's (ep_harness/conformance_rank.h); this prints one line per case on
// rank 0 and a summary with the seed that reproduces it.
#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/command.h"
#include "cli/commands/test/ep_reproduce.h"
#include "cli/commands/test/peer_results.h"
#include "cli/gpu_launch.h"
#include "host/dl/nccl.h"
#include "util/json.h"

#ifdef EPKIT_WITH_CUDA
#include "ep_harness/conformance_rank.h"
#include "runtime/connectivity.h"
#include "runtime/gpu_rank.h"
#endif

namespace epkit::cli {
namespace {

struct EpTestOptions {
  std::string mode = "normal";  // or "low-latency"
  int tokens = 4096;
  int hidden = 7168;
  int topk = 8;
  int experts = 256;
  int sms = 24;
  std::optional<std::uint64_t> seed;
};

// DeepEP's test_low_latency.py shape: what --mode low-latency runs unless
// the flags say otherwise.
constexpr int k_low_latency_default_tokens = 128;
constexpr int k_low_latency_default_experts = 288;

// The suite takes minutes at the default shape on 8 GPUs; the watchdog ends a
// rank 3 x --timeout + 10 s after it started.
constexpr double k_ep_default_timeout_s = 120.0;

#ifdef EPKIT_WITH_CUDA

nlohmann::json transports_json(const runtime::PeerTransports& transports) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [peers, transport] : transports) {
    out.push_back({{"from", peers.first}, {"to", peers.second}, {"transport", transport}});
  }
  return out;
}

std::string cc_text(const runtime::GpuInfo& g) {
  return fmt::format("{}.{}", g.cc_major, g.cc_minor);
}

void write_summary(runtime::GpuRank& r, const std::vector<nlohmann::json>& results,
                   const std::vector<runtime::Mismatch>& mismatches, bool transports_known,
                   bool json, std::ostream& out) {
  int failed = 0;
  for (const auto& res : results) failed += res.value("ok", false) ? 0 : 1;
  const auto& f0 = r.facts.front();
  nlohmann::json j = {{"ok", failed == 0},
                      {"world_size", r.launch.world_size},
                      {"nnodes", r.launch.nnodes},
                      {"launcher", runtime::to_string(r.launch.launcher)},
                      {"nccl_version", f0.nccl_version},
                      {"nccl_library", f0.nccl_library},
                      {"cuda_runtime", f0.cuda_version},
                      {"cuda_driver", runtime::cuda_version_string(r.gpu.driver_version)},
                      {"driver_version", f0.driver_version},
                      {"ranks", results},
                      {"transports_known", transports_known}};
  nlohmann::json mm = nlohmann::json::array();
  for (const auto& m : mismatches) {
    mm.push_back(
        {{"kind", runtime::to_string(m.kind)}, {"summary", m.summary}, {"ranks", m.ranks}});
  }
  j["mismatches"] = mm;
  if (json) {
    out << util::dump_json(j, 2) << "\n";
    return;
  }
  out << fmt::format("epkit test: {} of {} ranks OK on {} node{} ({})\n",
                     r.launch.world_size - failed, r.launch.world_size, r.launch.nnodes,
                     r.launch.nnodes == 1 ? "" : "s", runtime::to_string(r.launch.launcher));
  out << fmt::format("  NCCL {} ({}), CUDA runtime {}, driver {} (CUDA {})\n", f0.nccl_version,
                     f0.nccl_library, f0.cuda_version,
                     f0.driver_version.empty() ? "unknown" : f0.driver_version,
                     runtime::cuda_version_string(r.gpu.driver_version));
  for (const auto& res : results) {
    out << fmt::format("  {:<24} {}  {}  cc {}  {}\n", res.value("label", "?"),
                       res.value("gpu_pci_bus_id", "?"), res.value("gpu_name", "?"),
                       res.value("compute_capability", "?"),
                       res.value("ok", false) ? "OK" : "FAIL: " + res.value("reason", ""));
  }
  if (transports_known) {
    out << "  transports NCCL chose (from its INFO log):\n";
    for (const auto& res : results) {
      for (const auto& t : res.value("transports", nlohmann::json::array())) {
        // A rank's log also shows the receiving side of its peers'
        // connections, so the source is the line's, not the reporting rank.
        auto name = [&](int q) {
          return q >= 0 && static_cast<std::size_t>(q) < r.labels.size()
                     ? r.labels[static_cast<std::size_t>(q)]
                     : std::to_string(q);
        };
        out << fmt::format("    {} -> {}: {} (seen by {})\n", name(t.value("from", -1)),
                           name(t.value("to", -1)), t.value("transport", "?"),
                           res.value("label", "?"));
      }
    }
  } else {
    out << "  transports: unknown (NCCL_DEBUG is set or no temporary file could be made, so "
           "epkit did not capture NCCL's log)\n";
  }
  for (const auto& m : mismatches) {
    out << fmt::format("  mismatch ({}): {}\n", runtime::to_string(m.kind), m.summary);
  }
}

int rank_main(const host::Host& host, const runtime::LaunchInfo& launch, runtime::RankIo& io,
              const GpuLaunchOptions& opts) {
  auto fail = [&](int code, const std::string& why) {
    io.line("FAIL: " + why);
    return code;
  };
  // Before NCCL loads: it reads NCCL_DEBUG* once.
  const std::string log_path = runtime::capture_nccl_log(host, launch.rank);
  auto step = [&] { return runtime::Deadline::after_seconds(opts.timeout_s); };
  std::unique_ptr<runtime::GpuRank> joined;
  if (int rc = runtime::open_gpu_rank(host, launch, io, opts.timeout_s, joined);
      rc != runtime::k_gpu_ok)
    return rc;
  auto& r = *joined;
  const auto mismatches = runtime::compare_facts(r.facts);
  // Fault injection for the tests: this rank dies after NCCL started, the
  // others must name it and exit instead of hanging in the collectives.
  if (auto kill = host.env().get_nonempty("EPKIT_TEST_KILL_RANK");
      kill && *kill == std::to_string(launch.rank)) {
    std::raise(SIGKILL);
  }
  auto result = runtime::run_connectivity(r, opts.timeout_s);
  if (!result) {
    r.session->abort();
    return fail(runtime::exit_code_for(result.error()), result.error().message);
  }
  nlohmann::json mine = {{"rank", launch.rank},
                         {"label", r.labels[static_cast<std::size_t>(launch.rank)]},
                         {"ok", result->ok},
                         {"reason", result->reason},
                         {"gpu_name", r.gpu.name},
                         {"gpu_uuid", r.gpu.uuid},
                         {"gpu_pci_bus_id", r.gpu.pci_bus_id},
                         {"compute_capability", cc_text(r.gpu)},
                         {"wrong_all_reduce", result->wrong_allreduce},
                         {"wrong_ring", result->wrong_ring},
                         {"transports", transports_json(runtime::read_nccl_transports(log_path))}};
  auto set =
      r.store().set(fmt::format("test/result/{}", launch.rank),
                    mine.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), step());
  if (!set) return fail(runtime::exit_code_for(set.error()), set.error().message);
  int code = result->ok ? runtime::k_gpu_ok : runtime::k_gpu_wrong_data;
  if (launch.rank == 0) {
    std::vector<nlohmann::json> results;
    for (int q = 0; q < launch.world_size; ++q) {
      auto text = r.store().get(fmt::format("test/result/{}", q), step());
      if (!text) return fail(runtime::exit_code_for(text.error()), text.error().message);
      // Another process's JSON: only checked fields of checked types reach
      // the summary (a malformed one is a failed rank, named).
      results.push_back(checked_test_result(*text, q));
    }
    write_summary(r, results, mismatches, !log_path.empty(), opts.json, io.summary);
    io.summary.flush();
  }
  // Everyone waits for rank 0's summary before leaving: a rank that leaves
  // early looks like a crash to the store.
  code = runtime::close_gpu_rank(r, io, "test/done", opts.timeout_s, code);
  if (code == runtime::k_gpu_ok) {
    io.line("OK");
  } else if (!result->ok) {
    io.line("FAIL: " + result->reason);
  }
  return code;
}

void write_ep_summary(const harness::ConformanceReport& report, const EpTestOptions& e,
                      const runtime::LaunchInfo& launch, bool json, std::ostream& out) {
  if (json) {
    nlohmann::json failures = nlohmann::json::array();
    for (const auto& f : report.failures) {
      failures.push_back({{"case", f.case_name}, {"rank", f.rank}, {"detail", f.detail}});
    }
    nlohmann::json j = {
        {"ok", report.failed == 0}, {"mode", e.mode},           {"ranks", report.ranks},
        {"cases", report.cases},    {"passed", report.passed},  {"failed", report.failed},
        {"seed", report.seed},      {"num_tokens", e.tokens},   {"hidden", e.hidden},
        {"num_topk", e.topk},       {"num_experts", e.experts}, {"num_sms", e.sms},
        {"failures", failures}};
    out << util::dump_json(j, 2) << "\n";
    return;
  }
  out << fmt::format("epkit test ep: {} cases on {} ranks: {} passed, {} failed (seed {})\n",
                     report.cases, report.ranks, report.passed, report.failed, report.seed);
  for (const auto& f : report.failures) {
    out << fmt::format("  FAILED {} on rank {}: {}\n", f.case_name, f.rank, f.detail);
  }
  if (report.failed != 0) {
    const EpReproduce r{.mode = e.mode,
                        .seed = report.seed,
                        .tokens = e.tokens,
                        .hidden = e.hidden,
                        .topk = e.topk,
                        .experts = e.experts,
                        .sms = e.sms,
                        .ranks = report.ranks,
                        .nnodes = launch.nnodes,
                        .nproc_per_node = launch.local_world_size,
                        .oversubscribe = launch.share_gpus};
    out << "  reproduce with: " << ep_reproduce_command(r) << "\n";
  }
}

harness::ConformanceOptions conformance_options(const EpTestOptions& e, std::uint64_t seed,
                                                double timeout_s) {
  harness::ConformanceOptions co;
  co.mode = e.mode == "low-latency" ? harness::ConformanceMode::low_latency
                                    : harness::ConformanceMode::normal;
  co.shape.num_tokens = e.tokens;
  co.shape.hidden = e.hidden;
  co.shape.num_topk = e.topk;
  co.shape.num_experts = e.experts;
  co.num_sms = e.sms;
  co.seed = seed;
  co.timeout_s = timeout_s;
  return co;
}

#endif

}  // namespace

Command make_test_command() {
  return {"test", "Fail-fast GPU connectivity test: all-reduce, ring send/recv, barrier",
          [](CLI::App& app) -> Runner {
            auto common = std::make_shared<CommonOptions>();
            auto opts = std::make_shared<GpuLaunchOptions>();
            add_gpu_launch_options(app, *opts);
            app.footer(
                "Exit codes: 0 all OK, 10 wrong data, 11 NCCL/CUDA error, 12 no GPU/driver/"
                "libnccl, 75 a peer was lost, 124 timeout, 64 usage. See docs/gpu-commands.md.");
            auto ep_opts = std::make_shared<GpuLaunchOptions>();
            ep_opts->timeout_s = k_ep_default_timeout_s;
            auto e = std::make_shared<EpTestOptions>();
            CLI::App* ep = app.add_subcommand(
                "ep",
                "EP engine conformance: DeepEP V1's intranode tests plus bitwise equality "
                "with an NCCL reference, or (--mode low-latency) its low-latency tests against "
                "a host reference");
            ep->add_option("--mode", e->mode,
                           "normal (DeepEP's test_intranode.py) or low-latency "
                           "(test_low_latency.py: 128 tokens, 288 experts unless given)")
                ->check(CLI::IsMember({"normal", "low-latency"}));
            ep->add_option("--tokens", e->tokens,
                           "Tokens per rank (default 4096; low-latency: 128, also its "
                           "num_max_dispatch_tokens_per_rank)")
                ->check(CLI::Range(1, 1 << 20));
            ep->add_option("--hidden", e->hidden, "Hidden size, a multiple of 128 (default 7168)")
                ->check(CLI::Range(128, 1 << 16));
            ep->add_option("--topk", e->topk, "Experts per token (default 8)")
                ->check(CLI::Range(1, 64));
            ep->add_option("--experts", e->experts,
                           "Experts, a multiple of the rank count (default 256; low-latency: 288)")
                ->check(CLI::Range(1, 1 << 16));
            ep->add_option("--sms", e->sms, "SMs for the data kernels (default 24)")
                ->check(CLI::Range(1, 1024));
            ep->add_option("--seed", e->seed,
                           "Seed of the random inputs (default: from the clock, printed)");
            add_gpu_launch_options(*ep, *ep_opts);
            ep->get_option("--timeout")
                ->description(
                    "Seconds every step may take before the job is aborted (default "
                    "120)");
            ep->footer(
                "Exit codes: 0 every case passed, 10 wrong data, 11 NCCL/CUDA/engine error, 12 no "
                "GPU/driver/libnccl, 75 a peer was lost, 124 timeout, 64 usage. See "
                "docs/gpu-commands.md.");
            return [common, opts, ep, ep_opts, e](Io& io) -> int {
              if (ep->parsed()) {
                if (e->mode == "low-latency") {
                  if (ep->count("--tokens") == 0) e->tokens = k_low_latency_default_tokens;
                  if (ep->count("--experts") == 0) e->experts = k_low_latency_default_experts;
                }
                if (e->hidden % 128 != 0) {
                  return refuse_run(io, "test ep", ep_opts->json, k_exit_usage,
                                    fmt::format("--hidden {} is not a multiple of 128 (FP8 "
                                                "scales cover 128 channels)",
                                                e->hidden));
                }
                // Fresh inputs every run unless --seed asks for a repeat;
                // the agent picks it once so every rank it starts agrees.
                const std::uint64_t seed =
                    e->seed ? *e->seed
                            : static_cast<std::uint64_t>(
                                  std::chrono::system_clock::now().time_since_epoch().count()) %
                                  1000000007u;
                std::vector<std::string> child = {"ep",
                                                  "--mode",
                                                  e->mode,
                                                  "--tokens",
                                                  std::to_string(e->tokens),
                                                  "--hidden",
                                                  std::to_string(e->hidden),
                                                  "--topk",
                                                  std::to_string(e->topk),
                                                  "--experts",
                                                  std::to_string(e->experts),
                                                  "--sms",
                                                  std::to_string(e->sms),
                                                  "--seed",
                                                  std::to_string(seed),
                                                  "--timeout",
                                                  fmt::format("{}", ep_opts->timeout_s)};
                if (ep_opts->json) child.push_back("--json");
                RankMain ep_main;
#ifdef EPKIT_WITH_CUDA
                ep_main = [ep_opts, e, seed](const host::Host& h, const runtime::LaunchInfo& l,
                                             runtime::RankIo& rio) {
                  return harness::run_conformance_rank(
                      h, l, rio, conformance_options(*e, seed, ep_opts->timeout_s),
                      [&](const harness::ConformanceReport& report) {
                        write_ep_summary(report, *e, l, ep_opts->json, rio.summary);
                        rio.summary.flush();
                      });
                };
#endif
                return run_gpu_command(io, "test", *common, *ep_opts, child, ep_main);
              }
              std::vector<std::string> child = {"--timeout", fmt::format("{}", opts->timeout_s)};
              if (opts->json) child.push_back("--json");
              RankMain main;
#ifdef EPKIT_WITH_CUDA
              main = [opts](const host::Host& h, const runtime::LaunchInfo& l,
                            runtime::RankIo& rio) { return rank_main(h, l, rio, *opts); };
#endif
              return run_gpu_command(io, "test", *common, *opts, child, main);
            };
          }};
}

}  // namespace epkit::cli
