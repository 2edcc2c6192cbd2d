// What `epkit test` and `epkit bench nccl` share: the launch flags, the node
// agent that spawns one rank per local GPU, the per-rank watchdog, and the
// exit codes a Slurm prolog or a Kubernetes job can act on.
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "runtime/launch.h"

#ifdef EPKIT_WITH_CUDA
#include <memory>

#include "runtime/gpu_rank.h"
#endif

namespace epkit::cli {

/// Exit codes of the GPU commands (docs/runtime.md, "Exit codes").
enum GpuExit : int {
  k_gpu_ok = 0,
  k_gpu_wrong_data = 10,   // a collective delivered wrong values
  k_gpu_nccl_error = 11,   // NCCL or CUDA reported an error
  k_gpu_unavailable = 12,  // no GPU, no driver, no libnccl, or a build without CUDA
  k_gpu_below_busbw = 13,  // bench: average bus bandwidth under --min-busbw
  k_gpu_peer_lost = 75,    // another rank died or left (runtime::k_exit_peer_lost)
  k_gpu_timeout = 124,     // a step did not finish within --timeout
};

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

/// Where one rank writes: `out` for its lines (with "[host:rank] " when no
/// epkit agent adds it), `summary` for rank 0's report (the agent prints it
/// unprefixed after every rank finished).
struct RankIo {
  std::ostream& out;
  std::ostream& summary;
  std::string prefix;
  /// The last line written (a failure's reason for --json).
  mutable std::string last_line{};
  void line(const std::string& text) const;
};

using RankMain =
    std::function<int(const host::Host& host, const runtime::LaunchInfo& launch, RankIo& io)>;

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

#ifdef EPKIT_WITH_CUDA
/// The start every GPU rank shares: device and libnccl present, store joined,
/// facts exchanged (rank 0 prints the mismatches), NCCL started. Returns 0
/// with `out` set, or prints "FAIL: ..." and returns the exit code.
int open_gpu_rank(const host::Host& host, const runtime::LaunchInfo& launch, RankIo& io,
                  double timeout_s, std::unique_ptr<runtime::GpuRank>& out);
/// The end they share: a store barrier (rank 0's summary is out before
/// anyone leaves), the communicator closed, the store left. Returns `code`,
/// or the failure's exit code after printing it.
int close_gpu_rank(runtime::GpuRank& rank, RankIo& io, const std::string& barrier, double timeout_s,
                   int code);
#endif

/// The exit code for a runtime error: timeout, peer lost, unavailable, NCCL.
int exit_code_for(const Error& error);

}  // namespace epkit::cli
