// Launch and rank discovery: which launcher started this process and what
// rank, world and rendezvous address it was given.
//
// Every launcher names the same facts differently (torchrun's RANK, Open MPI's
// OMPI_COMM_WORLD_RANK, Slurm's SLURM_PROCID, ...). discover() reads them from
// an Env, validates them (a malformed value is an error naming the variable,
// never a guess), and records which variables decided each field so that a
// wrong rank can be traced to its source.
#pragma once

#include <epkit/result.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "host/env.h"

namespace epkit::runtime {

enum class Launcher {
  none,            // no launcher variables: one node, epkit spawns the local ranks
  epkit_spawn,     // a child of epkit's own spawner
  torchrun,        // RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
  openmpi,         // OMPI_COMM_WORLD_*
  pmi,             // MPICH/Intel MPI Hydra: PMI_RANK PMI_SIZE MPI_LOCALRANKID MPI_LOCALNRANKS
  slurm,           // SLURM_PROCID SLURM_LOCALID SLURM_NTASKS SLURM_NODELIST ...
  kubernetes,      // Indexed Job / JobSet: JOB_COMPLETION_INDEX NNODES GPUS_PER_NODE
  explicit_nodes,  // --nnodes/--node-rank/--master on bare nodes
};
const char* to_string(Launcher launcher);

inline constexpr std::uint16_t k_default_master_port = 29500;

/// What the command line said; every field is optional.
struct LaunchOptions {
  /// Spawn this many local ranks (one per GPU). Under a launcher that starts
  /// one process per node, the launcher's rank becomes the node rank.
  std::optional<int> nproc_per_node;
  std::optional<int> nnodes;
  std::optional<int> node_rank;
  /// "host" or "host:port" ("[v6addr]:port").
  std::optional<std::string> master;
  /// Local ranks to spawn when nothing else says (the CLI passes the GPU
  /// count); 0 means one process.
  int default_nproc = 0;
  /// --oversubscribe: ranks may share GPUs (round-robin) when there are more
  /// local ranks than GPUs. Children learn it through EPKIT_SHARE_GPUS=1.
  bool share_gpus = false;
};

struct LaunchInfo {
  Launcher launcher = Launcher::none;
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int node_rank = 0;
  int nnodes = 1;
  std::string master_addr = "127.0.0.1";
  std::uint16_t master_port = k_default_master_port;
  /// True when this process is a node agent that must start local_world_size
  /// ranks itself (Spawner); rank is then the first local rank's.
  bool spawn = false;
  /// Ranks may share GPUs (runtime/gpu_share.h): --oversubscribe, or
  /// EPKIT_SHARE_GPUS=1 from the agent or the user.
  bool share_gpus = false;
  /// NAME=value of the variables (or flags) that decided the fields above.
  std::vector<std::string> sources;

  /// One line: "slurm: rank 3/16 (local 3/8, node 0/2), master n01:29500".
  std::string describe() const;
};

Result<LaunchInfo> discover(const host::Env& env, const LaunchOptions& options = {});

/// The variables a node agent gives its local rank `local_rank` (torchrun's
/// names plus EPKIT_SPAWNED, so that discover() in the child finds them).
std::map<std::string, std::string> child_env(const LaunchInfo& agent, int local_rank);

/// "host", "host:port", "[v6]:port" -> {host, port or fallback}.
Result<std::pair<std::string, std::uint16_t>> parse_endpoint(const std::string& text,
                                                             std::uint16_t fallback_port);

}  // namespace epkit::runtime
