#include "cli/gpu_launch.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "host/dl/nccl.h"
#include "host/sysroot.h"
#include "runtime/gpu_share.h"
#include "runtime/spawner.h"
#include "util/json.h"

#ifdef EPKIT_WITH_CUDA
#include "runtime/gpu_rank.h"
#endif

namespace epkit::cli {
namespace {

constexpr const char* k_summary_var = "EPKIT_SUMMARY_FILE";
// A rank gets this much beyond --timeout to abort NCCL and report before the
// watchdog ends it: ncclCommAbort itself can block on a wedged GPU.
constexpr double k_watchdog_grace_s = 10.0;

void start_watchdog(double seconds, std::string label) {
  std::thread([seconds, label = std::move(label)] {
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<long>(seconds * 1000)));
    std::string msg = fmt::format("{}FAIL: still running {:.0f} s after the timeout; exiting\n",
                                  label, k_watchdog_grace_s);
    [[maybe_unused]] auto n = ::write(2, msg.data(), msg.size());
    std::_Exit(runtime::k_gpu_timeout);
  }).detach();
}

std::string host_name(const host::Host& host) {
  return host.fs().read_trimmed("/proc/sys/kernel/hostname").value_or(std::string("localhost"));
}

int default_gpu_count() {
#ifdef EPKIT_WITH_CUDA
  auto count = runtime::cuda_device_count();
  return count ? *count : 0;
#else
  return 0;
#endif
}

// A node agent with more ranks than GPUs: refuse without --oversubscribe
// (before any rank starts, so the reason is said once), or say that the GPUs
// are shared and whether MPS runs. A build without CUDA has no GPUs to count:
// its ranks report that themselves.
int check_gpu_sharing(Io& io, const std::string& name, const host::Host& host,
                      const runtime::LaunchInfo& launch, bool json) {
#ifdef EPKIT_WITH_CUDA
  auto count = runtime::cuda_device_count();
  if (!count || launch.local_world_size <= *count) return runtime::k_gpu_ok;
  if (!launch.share_gpus) {
    io.err << fmt::format(
        "epkit {}: {} ranks on this node but {} GPU{} visible; pass --oversubscribe to let ranks "
        "share GPUs (checks only: timings are not representative)\n",
        name, launch.local_world_size, *count, *count == 1 ? "" : "s");
    return runtime::k_gpu_unavailable;
  }
  // With --json, standard output holds the JSON document alone.
  std::ostream& notice = json ? io.err : io.out;
  notice << runtime::shared_gpu_notice(launch.local_world_size, *count,
                                       runtime::detect_mps(host.env(), host.fs()));
  notice.flush();
#else
  (void)io, (void)name, (void)host, (void)launch, (void)json;
#endif
  return runtime::k_gpu_ok;
}

}  // namespace

void add_gpu_launch_options(CLI::App& app, GpuLaunchOptions& opts) {
  app.add_option("--nproc-per-node", opts.nproc_per_node,
                 "Ranks to start on this node, one per GPU (default: all GPUs)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--nnodes", opts.nnodes, "Nodes in the job (bare nodes)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--node-rank", opts.node_rank, "This node's index (bare nodes)")
      ->check(CLI::Range(0, 1 << 16));
  app.add_option("--master", opts.master, "Rank 0's host[:port] (bare nodes)");
  app.add_option("--timeout", opts.timeout_s,
                 "Seconds every step may take before the job is aborted (default 60)")
      ->check(finite_range(0.1, 86400.0));
  app.add_flag("--json", opts.json, "Write the summary as JSON");
  app.add_flag("--oversubscribe", opts.oversubscribe,
               "Let ranks share GPUs round-robin when there are more ranks than GPUs (checks "
               "only: timings are not representative; start MPS so ranks run concurrently)");
}

namespace {

// run_gpu_command's work; `error` gets the reason of a failure, `summary`
// whether a summary reached io.out.
int run_gpu_command_impl(Io& io, const std::string& name, const CommonOptions& common,
                         const GpuLaunchOptions& opts, const std::vector<std::string>& child_args,
                         const RankMain& rank_main, std::string& error, bool& summary) {
  auto refuse = [&](int code, const std::string& why) {
    io.err << "epkit " << name << ": " << why << "\n";
    error = why;
    return code;
  };
  auto host = make_host(common);
  if (!host) return refuse(k_exit_usage, host.error().message);
  runtime::LaunchOptions lo;
  lo.nproc_per_node = opts.nproc_per_node;
  lo.nnodes = opts.nnodes;
  lo.node_rank = opts.node_rank;
  lo.master = opts.master;
  lo.share_gpus = opts.oversubscribe;
  const bool spawned = host->env().has("EPKIT_SPAWNED");
  if (!spawned && !opts.nproc_per_node) lo.default_nproc = default_gpu_count();
  auto launch = runtime::discover(host->env(), lo);
  if (!launch) return refuse(k_exit_usage, launch.error().message);
  const std::string label = host_name(*host);

  if (launch->spawn) {
    if (launch->local_world_size < 1) {
      return refuse(
          runtime::k_gpu_unavailable,
          fmt::format("no GPU to start a rank on ({}); pass --nproc-per-node to force",
#ifdef EPKIT_WITH_CUDA
                      runtime::cuda_device_count() ? std::string("0 GPUs")
                                                   : runtime::cuda_device_count().error().message
#else
                      host::dl::nccl_not_built().message
#endif
                      ));
    }
    if (int code = check_gpu_sharing(io, name, *host, *launch, opts.json);
        code != runtime::k_gpu_ok) {
      error = "more ranks than GPUs on this node";
      return code;
    }
    auto path = host::make_temp_file(host->env(), "epkit-summary-");
    if (!path) return refuse(runtime::k_gpu_nccl_error, path.error().message);
    runtime::SpawnOptions so;
    so.argv = {"/proc/self/exe", name};
    so.argv.insert(so.argv.end(), child_args.begin(), child_args.end());
    so.agent = *launch;
    so.extra_env[k_summary_var] = *path;
    so.extra_env["NCCL_NVLS_ENABLE"] = host->env().get("NCCL_NVLS_ENABLE").value_or("0");
    so.host_label = label;
    io.out.flush();
    io.err.flush();
    // Ranks get the whole run's steps; the agent waits a little longer so a
    // rank's own timeout report arrives before the agent stops it.
    auto deadline = runtime::Deadline::after_seconds(opts.timeout_s * 3 + 2 * k_watchdog_grace_s);
    auto report = runtime::spawn_local_ranks(so, host->env(), deadline);
    // Our own file, written by our ranks: a summary is a few KiB.
    std::string text = host::read_regular_file(*path, *path, 64 << 20, host::OverLimit::truncate)
                           .value_or(std::string());
    std::remove(path->c_str());
    if (!report) return refuse(runtime::k_gpu_unavailable, report.error().message);
    io.out << text;
    summary = !text.empty();
    int code = report->exit_code();
    if (code != 0) {
      error = report->summary(label);
      io.err << fmt::format("epkit {}: {} (exit {})\n", name, error, code);
    }
    return code;
  }

  if (spawned) {
    if (auto watch = runtime::watch_lifeline(host->env()); !watch) {
      return refuse(k_exit_usage, watch.error().message);
    }
  }
  start_watchdog(opts.timeout_s * 3 + k_watchdog_grace_s,
                 fmt::format("[{}:{}] ", label, launch->rank));
  std::ofstream summary_file;
  if (auto file = host->env().get_nonempty(k_summary_var)) summary_file.open(*file);
  // Without an agent, rank 0's summary is held until the rank ends, so that
  // a rank that fails first can still give JSON in its place.
  std::ostringstream held;
  // With --json, standard output holds the JSON document alone: a rank's
  // lines go to standard error.
  runtime::RankIo rio{opts.json ? io.err : io.out,
                      summary_file.is_open() ? static_cast<std::ostream&>(summary_file) : held,
                      spawned ? std::string() : fmt::format("[{}:{}] ", label, launch->rank)};
  int code = runtime::k_gpu_unavailable;
  if (!rank_main) {
    rio.line(
        "FAIL: this epkit was built without CUDA (no nvcc at build time); GPU commands need a "
        "build with the CUDA toolkit");
  } else {
    code = rank_main(*host, *launch, rio);
  }
  io.out << held.str();
  // A spawned rank's summary goes to the agent, which answers for the JSON;
  // without an agent every rank but 0 keeps standard output for its lines.
  summary = spawned || launch->rank != 0 || !held.str().empty();
  if (code != 0) error = rio.last_line;
  return code;
}

}  // namespace

// With --json, standard output holds one JSON document whatever happens:
// the summary, or this object saying why there is none.
void write_failure_json(Io& io, const std::string& command, int code, const std::string& error) {
  nlohmann::ordered_json j;
  j["ok"] = false;
  j["command"] = command;
  j["exit_code"] = code;
  j["error"] = error;
  io.out << util::dump_json(j, 2) << "\n";
}

int refuse_run(Io& io, const std::string& command, bool json, int code, const std::string& why) {
  io.err << "epkit " << command << ": " << why << "\n";
  if (json) write_failure_json(io, command, code, why);
  return code;
}

int run_gpu_command(Io& io, const std::string& name, const CommonOptions& common,
                    const GpuLaunchOptions& opts, const std::vector<std::string>& child_args,
                    const RankMain& rank_main) {
  std::string error;
  bool summary = false;
  int code = run_gpu_command_impl(io, name, common, opts, child_args, rank_main, error, summary);
  if (opts.json && code != 0 && !summary) write_failure_json(io, name, code, error);
  return code;
}

}  // namespace epkit::cli
