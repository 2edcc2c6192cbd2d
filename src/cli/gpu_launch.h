// What the GPU commands share: the launch flags, the node agent that spawns
// one rank per local GPU, the per-rank watchdog, and the JSON of a run that
// ends without a summary. A rank's own start and end, and the exit codes, are
// runtime/rank_session.h's.
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "runtime/launch.h"
#include "runtime/rank_session.h"

namespace epkit::cli {

// A usage error is a usage error whichever layer finds it.
static_assert(static_cast<int>(runtime::k_gpu_usage) == static_cast<int>(k_exit_usage));

struct GpuLaunchOptions {
  std::optional<int> nproc_per_node;
  std::optional<int> nnodes;
  std::optional<int> node_rank;
  std::optional<std::string> master;
  double timeout_s = 60.0;
  bool json = false;
  /// Ranks share GPUs round-robin when there are more ranks than GPUs
  /// (runtime/gpu_share.h): for checks on small machines, never for timings.
  bool oversubscribe = false;
};

void add_gpu_launch_options(CLI::App& app, GpuLaunchOptions& opts);

using RankMain = std::function<int(const host::Host& host, const runtime::LaunchInfo& launch,
                                   runtime::RankIo& io)>;

/// Discovers the launch; a node agent spawns `child_args` (epkit's own
/// arguments for one rank, without the launch flags) once per local GPU and
/// returns their combined exit code; a rank runs `rank_main` under a
/// watchdog that ends the process if it outlives --timeout by 10 s. With
/// --json, a failure that leaves no summary prints a JSON object of its own
/// ({"ok": false, "command", "exit_code", "error"}).
int run_gpu_command(Io& io, const std::string& name, const CommonOptions& common,
                    const GpuLaunchOptions& opts, const std::vector<std::string>& child_args,
                    const RankMain& rank_main);

/// The JSON a GPU command prints with --json when it ends without a summary:
/// {"ok": false, "command", "exit_code", "error"}.
void write_failure_json(Io& io, const std::string& command, int code, const std::string& error);
/// A refusal before any rank starts: "epkit <command>: <why>" on standard
/// error, and with --json the failure object on standard output. Returns code.
int refuse_run(Io& io, const std::string& command, bool json, int code, const std::string& why);

}  // namespace epkit::cli
