// epkit test: proves every GPU of the job can talk to every other within a
// bounded time. Each rank's run is the runtime's connectivity test
// (runtime/connectivity.h: a checked all-reduce, a ring send/recv with a
// checked payload and a barrier, the results shared through the store); its
// ranks print "[host:rank] OK" or the reason, and this prints rank 0's
// summary of versions and the transport NCCL chose per peer.
//
// epkit test ep: the EP engine's conformance suite, each rank's run being the
// harness's (ep_harness/conformance_rank.h); this prints one line per case on
// rank 0 and a summary with the seed that reproduces it.
#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/command.h"
#include "cli/commands/test/ep_reproduce.h"
#include "cli/gpu_launch.h"
#include "host/dl/nccl.h"
#include "util/json.h"

#ifdef EPKIT_WITH_CUDA
#include "ep_harness/conformance_rank.h"
#include "runtime/connectivity.h"
#include "runtime/connectivity_result.h"
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
  std::string network_leg = "nccl";  // or "emulated" (across faked nodes)
  double nic_gbps = 50;
  double nic_latency_us = 2;
  bool leg_overlap = false;
  bool rings = false;
  int ring_rows = 0;
};

// DeepEP's test_low_latency.py shape: what --mode low-latency runs unless
// the flags say otherwise.
constexpr int k_low_latency_default_tokens = 128;
constexpr int k_low_latency_default_experts = 288;

// The suite takes minutes at the default shape on 8 GPUs; the watchdog ends a
// rank 3 x --timeout + 10 s after it started.
constexpr double k_ep_default_timeout_s = 120.0;

#ifdef EPKIT_WITH_CUDA

void write_summary(const runtime::ConnectivitySummary& summary, bool json, std::ostream& out) {
  const runtime::GpuRank& r = summary.rank;
  const auto& results = summary.results;
  const auto& mismatches = summary.mismatches;
  const bool transports_known = summary.transports_known;
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
                        .oversubscribe = launch.share_gpus,
                        .network_leg = e.network_leg,
                        .nic_gbps = e.nic_gbps,
                        .nic_latency_us = e.nic_latency_us,
                        .leg_overlap = e.leg_overlap,
                        .rings = e.rings,
                        .ring_rows = e.ring_rows};
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
  co.network_leg = e.network_leg == "emulated" ? ep::BufferOptions::NetworkLeg::emulated_nic
                                               : ep::BufferOptions::NetworkLeg::nccl_host;
  co.nic_gbps = e.nic_gbps;
  co.nic_latency_us = e.nic_latency_us;
  co.leg_overlap = e.leg_overlap;
  co.rings = e.rings;
  co.ring_rows = e.ring_rows;
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
            ep->add_option("--network-leg", e->network_leg,
                           "Across nodes: nccl (NCCL's host API, default) or emulated (the "
                           "device-driven leg over an emulated NIC, for nodes faked on one "
                           "host's GPUs)")
                ->check(CLI::IsMember({"nccl", "emulated"}));
            ep->add_option("--nic-gbps", e->nic_gbps,
                           "The emulated NIC's cap per rank in GB/s (default 50)")
                ->check(CLI::Range(0.001, 10000.0));
            ep->add_option("--nic-latency-us", e->nic_latency_us,
                           "The emulated NIC's latency in us (default 2)")
                ->check(CLI::Range(0.0, 1e6));
            ep->add_flag("--leg-overlap", e->leg_overlap,
                         "On the emulated leg: overlap the network leg with the NVLink legs "
                         "(forward each chunk as it lands, send each chunk of sums when done)");
            ep->add_flag("--rings", e->rings,
                         "On the emulated leg: ring mode (dispatch and combine stream through "
                         "fixed rings; memory independent of the node count)");
            ep->add_option("--ring-rows", e->ring_rows,
                           "With --rings: rows each ring holds (default: the Buffer's 512 network, "
                           "256 NVLink), small to test wrap-around and back-pressure")
                ->check(CLI::Range(2, 1 << 20));
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
                                                  "--network-leg",
                                                  e->network_leg,
                                                  "--nic-gbps",
                                                  fmt::format("{}", e->nic_gbps),
                                                  "--nic-latency-us",
                                                  fmt::format("{}", e->nic_latency_us),
                                                  "--timeout",
                                                  fmt::format("{}", ep_opts->timeout_s)};
                if (ep_opts->json) child.push_back("--json");
                if (e->leg_overlap) child.push_back("--leg-overlap");
                if (e->rings) child.push_back("--rings");
                if (e->ring_rows > 0) {
                  child.push_back("--ring-rows");
                  child.push_back(std::to_string(e->ring_rows));
                }
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
                            runtime::RankIo& rio) {
                return runtime::run_connectivity_rank(
                    h, l, rio, opts->timeout_s, [&](const runtime::ConnectivitySummary& summary) {
                      write_summary(summary, opts->json, rio.summary);
                      rio.summary.flush();
                    });
              };
#endif
              return run_gpu_command(io, "test", *common, *opts, child, main);
            };
          }};
}

}  // namespace epkit::cli
