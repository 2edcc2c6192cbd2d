#include "runtime/launch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>

#include "runtime/gpu_share.h"
#include "runtime/hostlist.h"
#include "runtime/socket.h"

namespace epkit::runtime {
namespace {

// Largest rank count accepted; a bigger value is a typo or garbage.
constexpr int k_max_world = 1 << 20;

// Reads one launcher's variables, recording each one used in info.sources and
// naming the launcher and variable in every error.
class Vars {
 public:
  Vars(const host::Env& env, Launcher launcher, LaunchInfo& info)
      : m_env(env), m_launcher(launcher), m_info(info) {}

  std::optional<std::string> text(std::string_view name) {
    auto value = m_env.get_nonempty(name);
    if (value) m_info.sources.push_back(fmt::format("{}={}", name, *value));
    return value;
  }

  /// The first of `names` that is set.
  std::optional<std::string> first_text(std::initializer_list<std::string_view> names) {
    for (auto name : names) {
      if (auto value = text(name)) return value;
    }
    return std::nullopt;
  }

  Result<std::optional<int>> optional_int(std::string_view name, int min, int max) {
    auto value = text(name);
    if (!value) return std::optional<int>();
    auto parsed = parse(name, *value, min, max);
    if (!parsed) return parsed.error();
    return std::optional<int>(*parsed);
  }

  Result<int> required_int(std::string_view name, int min, int max, std::string_view why) {
    auto value = text(name);
    if (!value) return missing(name, why);
    return parse(name, *value, min, max);
  }

  Error missing(std::string_view name, std::string_view why) const {
    return make_error(ErrorCode::invalid,
                      fmt::format("{}: {} is not set ({})", to_string(m_launcher), name, why));
  }

  Error invalid(std::string message) const {
    return make_error(ErrorCode::invalid,
                      fmt::format("{}: {}", to_string(m_launcher), std::move(message)));
  }

  Result<int> parse(std::string_view name, const std::string& value, int min, int max) const {
    int out = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
    if (ec != std::errc() || end != value.data() + value.size()) {
      return invalid(fmt::format("{}='{}' is not an integer", name, value));
    }
    if (out < min || out > max) {
      return invalid(fmt::format("{}={} is outside {}..{}", name, out, min, max));
    }
    return out;
  }

 private:
  const host::Env& m_env;
  Launcher m_launcher;
  LaunchInfo& m_info;
};

Result<void> check_consistent(const LaunchInfo& info) {
  auto bad = [&](std::string message) -> Result<void> {
    return make_error(ErrorCode::invalid, fmt::format("{}: {} (from {})", to_string(info.launcher),
                                                      message, fmt::join(info.sources, " ")));
  };
  if (info.rank >= info.world_size) {
    return bad(fmt::format("rank {} is not below world size {}", info.rank, info.world_size));
  }
  if (info.local_rank >= info.local_world_size) {
    return bad(fmt::format("local rank {} is not below local world size {}", info.local_rank,
                           info.local_world_size));
  }
  if (info.local_world_size > info.world_size) {
    return bad(fmt::format("local world size {} exceeds world size {}", info.local_world_size,
                           info.world_size));
  }
  if (info.node_rank >= info.nnodes) {
    return bad(fmt::format("node rank {} is not below node count {}", info.node_rank, info.nnodes));
  }
  if (info.nnodes > info.world_size) {
    return bad(fmt::format("{} nodes for {} ranks", info.nnodes, info.world_size));
  }
  return {};
}

// What a host name, an IPv4 or a bracketed IPv6 address with a port and a
// zone may hold; anything else is refused before it is echoed or resolved.
bool address_chars(std::string_view text) {
  return text.size() <= 300 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '-' || c == '_' || c == ':' || c == '[' || c == ']' || c == '%';
         });
}

// MASTER_ADDR/MASTER_PORT where the launcher has no rendezvous of its own. One
// node can default to loopback; several cannot guess.
Result<void> read_master(Vars& vars, LaunchInfo& info, bool single_node,
                         std::optional<std::string> fallback_host = std::nullopt) {
  if (auto addr = vars.text("MASTER_ADDR")) {
    if (!address_chars(*addr)) {
      return make_error(
          ErrorCode::invalid,
          "MASTER_ADDR holds characters other than letters, digits and . _ - : [ ] %");
    }
    info.master_addr = *addr;
  } else if (fallback_host) {
    info.master_addr = *fallback_host;
  } else if (!single_node) {
    return vars.missing("MASTER_ADDR",
                        "ranks span several nodes and this launcher has no "
                        "rendezvous address; set it or pass --master");
  }
  auto port = vars.optional_int("MASTER_PORT", 1, 65535);
  if (!port) return port.error();
  if (*port) info.master_port = static_cast<std::uint16_t>(**port);
  return {};
}

Result<LaunchInfo> from_torchrun(const host::Env& env, Launcher launcher) {
  LaunchInfo info;
  info.launcher = launcher;
  Vars vars(env, launcher, info);
  const char* why = "torchrun sets RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE together";
  auto world = vars.required_int("WORLD_SIZE", 1, k_max_world, why);
  if (!world) return world.error();
  auto rank = vars.required_int("RANK", 0, k_max_world, why);
  if (!rank) return rank.error();
  auto local_rank = vars.required_int("LOCAL_RANK", 0, k_max_world, why);
  if (!local_rank) return local_rank.error();
  auto local_world = vars.required_int("LOCAL_WORLD_SIZE", 1, k_max_world, why);
  if (!local_world) return local_world.error();
  info.world_size = *world;
  info.rank = *rank;
  info.local_rank = *local_rank;
  info.local_world_size = *local_world;
  // GROUP_RANK is torchrun's node rank; epkit's spawner passes EPKIT_NODE_RANK.
  auto node_rank = vars.optional_int(
      launcher == Launcher::epkit_spawn ? "EPKIT_NODE_RANK" : "GROUP_RANK", 0, k_max_world);
  if (!node_rank) return node_rank.error();
  info.node_rank = node_rank->value_or(info.rank / info.local_world_size);
  auto nnodes = vars.optional_int(
      launcher == Launcher::epkit_spawn ? "EPKIT_NNODES" : "GROUP_WORLD_SIZE", 1, k_max_world);
  if (!nnodes) return nnodes.error();
  info.nnodes =
      nnodes->value_or((info.world_size + info.local_world_size - 1) / info.local_world_size);
  auto master = read_master(vars, info, info.local_world_size == info.world_size);
  if (!master) return master.error();
  return info;
}

// Open MPI and Hydra (PMI): ranks and local ranks, but no rendezvous address
// and no node index; the node rank assumes ranks are placed by node (mpirun's
// default --map-by slot).
Result<LaunchInfo> from_mpi(const host::Env& env, Launcher launcher, std::string_view rank_name,
                            std::string_view size_name, std::string_view local_rank_name,
                            std::string_view local_size_name) {
  LaunchInfo info;
  info.launcher = launcher;
  Vars vars(env, launcher, info);
  auto rank = vars.required_int(rank_name, 0, k_max_world, "the launcher sets it for each rank");
  if (!rank) return rank.error();
  auto world = vars.required_int(size_name, 1, k_max_world, "the launcher sets it with the rank");
  if (!world) return world.error();
  auto local_rank = vars.optional_int(local_rank_name, 0, k_max_world);
  if (!local_rank) return local_rank.error();
  auto local_world = vars.optional_int(local_size_name, 1, k_max_world);
  if (!local_world) return local_world.error();
  if (local_rank->has_value() != local_world->has_value()) {
    return vars.missing(local_rank->has_value() ? local_size_name : local_rank_name,
                        fmt::format("{} and {} come together", local_rank_name, local_size_name));
  }
  info.rank = *rank;
  info.world_size = *world;
  info.local_rank = local_rank->value_or(0);
  info.local_world_size = local_world->value_or(1);
  info.node_rank = info.rank / info.local_world_size;
  info.nnodes = (info.world_size + info.local_world_size - 1) / info.local_world_size;
  auto master = read_master(vars, info, info.local_world_size == info.world_size);
  if (!master) return master.error();
  return info;
}

Result<LaunchInfo> from_slurm(const host::Env& env) {
  LaunchInfo info;
  info.launcher = Launcher::slurm;
  Vars vars(env, Launcher::slurm, info);
  auto rank = vars.required_int("SLURM_PROCID", 0, k_max_world, "srun sets it for each task");
  if (!rank) return rank.error();
  auto local_rank =
      vars.required_int("SLURM_LOCALID", 0, k_max_world, "srun sets it with SLURM_PROCID");
  if (!local_rank) return local_rank.error();
  // A step's own counts win over the allocation's.
  std::optional<std::string> world_name;
  for (auto name : {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"}) {
    if (env.get_nonempty(name)) {
      world_name = name;
      break;
    }
  }
  if (!world_name) return vars.missing("SLURM_NTASKS", "srun sets it; is this an srun step?");
  auto world = vars.required_int(*world_name, 1, k_max_world, "");
  if (!world) return world.error();
  auto nodelist = vars.first_text({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (!nodelist) return vars.missing("SLURM_NODELIST", "srun sets it with SLURM_PROCID");
  auto hosts = expand_hostlist(*nodelist);
  if (!hosts) return vars.invalid(hosts.error().message);
  auto node_rank = vars.optional_int("SLURM_NODEID", 0, k_max_world);
  if (!node_rank) return node_rank.error();

  info.rank = *rank;
  info.local_rank = *local_rank;
  info.world_size = *world;
  info.nnodes = static_cast<int>(hosts->size());
  if (!*node_rank && info.nnodes > 1) {
    return vars.missing("SLURM_NODEID", "the node list has several hosts");
  }
  info.node_rank = node_rank->value_or(0);
  if (info.node_rank >= info.nnodes) {
    return vars.invalid(
        fmt::format("SLURM_NODEID={} but the node list has {} hosts", info.node_rank, info.nnodes));
  }
  // Tasks on this node: the per-node list indexed by node id, else an even split.
  if (auto per_node = vars.first_text({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})) {
    auto counts = expand_tasks_per_node(*per_node);
    if (!counts) return vars.invalid(counts.error().message);
    if (counts->size() != hosts->size()) {
      return vars.invalid(fmt::format("tasks per node '{}' lists {} nodes but the node list has {}",
                                      *per_node, counts->size(), hosts->size()));
    }
    info.local_world_size = (*counts)[static_cast<std::size_t>(info.node_rank)];
  } else {
    info.local_world_size = (info.world_size + info.nnodes - 1) / info.nnodes;
  }
  if (info.nnodes > info.world_size) info.nnodes = info.world_size;  // fewer tasks than nodes
  auto master = read_master(vars, info, info.nnodes == 1, hosts->front());
  if (!master) return master.error();
  if (!env.get_nonempty("MASTER_PORT")) {
    // Jobs sharing a node should not share a port: derive it from the job id.
    auto job = vars.optional_int("SLURM_JOB_ID", 0, 2'000'000'000);
    if (!job) return job.error();
    if (*job) info.master_port = static_cast<std::uint16_t>(k_default_master_port + **job % 1000);
  }
  return info;
}

// One process per node (a pod); it spawns GPUS_PER_NODE local ranks.
Result<LaunchInfo> from_kubernetes(const host::Env& env, const LaunchOptions& options) {
  LaunchInfo info;
  info.launcher = Launcher::kubernetes;
  info.spawn = true;
  Vars vars(env, Launcher::kubernetes, info);
  auto index = vars.required_int("JOB_COMPLETION_INDEX", 0, k_max_world, "an Indexed Job sets it");
  if (!index) return index.error();
  auto nnodes =
      vars.required_int("NNODES", 1, k_max_world, "set it to the Job's completions (parallelism)");
  if (!nnodes) return nnodes.error();
  auto gpus = vars.optional_int("GPUS_PER_NODE", 1, 1024);
  if (!gpus) return gpus.error();
  info.node_rank = *index;
  info.nnodes = *nnodes;
  if (options.nproc_per_node) {
    info.local_world_size = *options.nproc_per_node;
    info.sources.push_back(fmt::format("--nproc-per-node={}", info.local_world_size));
  } else if (*gpus) {
    info.local_world_size = **gpus;
  } else if (options.default_nproc > 0) {
    info.local_world_size = options.default_nproc;
    info.sources.push_back(fmt::format("visible GPUs={}", info.local_world_size));
  } else {
    return vars.missing("GPUS_PER_NODE", "no GPU count was given and none was found");
  }
  if (info.node_rank >= info.nnodes) {
    return vars.invalid(
        fmt::format("JOB_COMPLETION_INDEX={} is not below NNODES={}", info.node_rank, info.nnodes));
  }
  info.world_size = info.nnodes * info.local_world_size;
  info.rank = info.node_rank * info.local_world_size;
  auto master = read_master(vars, info, info.nnodes == 1);
  if (!master) return master.error();
  return info;
}

bool any_set(const host::Env& env, std::initializer_list<std::string_view> names) {
  for (auto name : names) {
    if (env.get_nonempty(name)) return true;
  }
  return false;
}

// The launcher this environment shows, in order of precedence: a spawned
// child first (its parent's launcher variables are still inherited), then
// per-rank launchers, then per-node ones.
Result<LaunchInfo> from_environment(const host::Env& env, const LaunchOptions& options) {
  if (env.get_nonempty("EPKIT_SPAWNED")) return from_torchrun(env, Launcher::epkit_spawn);
  if (any_set(env, {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"})) {
    return from_torchrun(env, Launcher::torchrun);
  }
  if (any_set(env, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"})) {
    return from_mpi(env, Launcher::openmpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
  }
  if (any_set(env, {"PMI_RANK", "PMI_SIZE"})) {
    return from_mpi(env, Launcher::pmi, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                    "MPI_LOCALNRANKS");
  }
  if (env.get_nonempty("PMIX_RANK")) {
    return make_error(ErrorCode::invalid,
                      "pmi: PMIX_RANK is set but PMIx puts no world size in the environment; "
                      "launch with mpirun (OMPI_COMM_WORLD_*), srun, or set WORLD_SIZE");
  }
  if (env.get_nonempty("SLURM_PROCID")) return from_slurm(env);
  if (env.get_nonempty("JOB_COMPLETION_INDEX")) return from_kubernetes(env, options);
  LaunchInfo info;
  return info;
}

}  // namespace

const char* to_string(Launcher launcher) {
  switch (launcher) {
    case Launcher::none:
      return "none";
    case Launcher::epkit_spawn:
      return "epkit";
    case Launcher::torchrun:
      return "torchrun";
    case Launcher::openmpi:
      return "openmpi";
    case Launcher::pmi:
      return "pmi";
    case Launcher::slurm:
      return "slurm";
    case Launcher::kubernetes:
      return "kubernetes";
    case Launcher::explicit_nodes:
      return "explicit";
  }
  return "none";
}

std::string LaunchInfo::describe() const {
  return fmt::format("{}: rank {}/{} (local {}/{}, node {}/{}){}, master {}", to_string(launcher),
                     rank, world_size, local_rank, local_world_size, node_rank, nnodes,
                     spawn ? ", spawning local ranks" : "",
                     format_endpoint(master_addr, master_port));
}

Result<std::pair<std::string, std::uint16_t>> parse_endpoint(const std::string& text,
                                                             std::uint16_t fallback_port) {
  auto bad = [&](std::string_view why) {
    return make_error(ErrorCode::invalid, fmt::format("address '{}': {}", text, why));
  };
  // Checked before it is echoed: a control character or a shell one in an
  // address is a typo or an attack, and must not reach a terminal raw.
  if (!address_chars(text)) {
    return make_error(ErrorCode::invalid,
                      "address: only letters, digits and . _ - : [ ] % (a host name or address, "
                      "with an optional :port)");
  }
  std::string host = text;
  std::string port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos) return bad("unbalanced '['");
    host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') return bad("expected ':' after ']'");
      port_text = text.substr(close + 2);
      if (port_text.empty()) return bad("empty port");
    }
  } else if (auto colon = text.find(':'); colon != std::string::npos) {
    if (text.find(':', colon + 1) != std::string::npos) {
      return bad("an IPv6 address needs brackets: [addr]:port");
    }
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
    if (port_text.empty()) return bad("empty port");
  }
  if (host.empty()) return bad("empty host");
  std::uint16_t port = fallback_port;
  if (!port_text.empty()) {
    unsigned value = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || value == 0 ||
        value > 65535) {
      return bad(fmt::format("port '{}' is not 1..65535", port_text));
    }
    port = static_cast<std::uint16_t>(value);
  }
  return std::pair{host, port};
}

Result<LaunchInfo> discover(const host::Env& env, const LaunchOptions& options) {
  auto flag_error = [](std::string message) {
    return make_error(ErrorCode::invalid, "options: " + std::move(message));
  };
  if (options.nproc_per_node && (*options.nproc_per_node < 1 || *options.nproc_per_node > 1024)) {
    return flag_error(
        fmt::format("--nproc-per-node {} is outside 1..1024", *options.nproc_per_node));
  }
  if (options.nnodes && (*options.nnodes < 1 || *options.nnodes > k_max_world)) {
    return flag_error(fmt::format("--nnodes {} is outside 1..{}", *options.nnodes, k_max_world));
  }
  if (options.node_rank && *options.node_rank < 0) {
    return flag_error(fmt::format("--node-rank {} is negative", *options.node_rank));
  }

  LaunchInfo info;
  bool explicit_nodes = options.nnodes || options.node_rank || options.master;
  if (explicit_nodes) {
    // Bare nodes: the flags say everything; launcher variables are ignored.
    info.launcher = Launcher::explicit_nodes;
    info.nnodes = options.nnodes.value_or(1);
    info.node_rank = options.node_rank.value_or(0);
    info.sources.push_back(fmt::format("--nnodes={}", info.nnodes));
    info.sources.push_back(fmt::format("--node-rank={}", info.node_rank));
    if (info.node_rank >= info.nnodes) {
      return flag_error(
          fmt::format("--node-rank {} is not below --nnodes {}", info.node_rank, info.nnodes));
    }
    if (options.master) {
      auto endpoint = parse_endpoint(*options.master, k_default_master_port);
      if (!endpoint) return flag_error("--master " + endpoint.error().message);
      info.master_addr = endpoint->first;
      info.master_port = endpoint->second;
      info.sources.push_back("--master=" + *options.master);
    } else if (info.nnodes > 1) {
      return flag_error("--nnodes > 1 needs --master host[:port] (rank 0's node)");
    }
  } else {
    auto found = from_environment(env, options);
    if (!found) return found.error();
    info = std::move(*found);
  }

  // Node agents: explicit nodes, no launcher, or a per-node launcher with
  // --nproc-per-node (its rank becomes the node rank).
  if (info.launcher == Launcher::kubernetes) {
    // from_kubernetes decided already.
  } else if (info.launcher == Launcher::explicit_nodes || info.launcher == Launcher::none) {
    int nproc = options.nproc_per_node.value_or(options.default_nproc);
    if (nproc > 0) {
      info.spawn = true;
      info.local_world_size = nproc;
      info.local_rank = 0;
      info.world_size = info.nnodes * nproc;
      info.rank = info.node_rank * nproc;
      info.sources.push_back(fmt::format(
          "{}={}", options.nproc_per_node ? "--nproc-per-node" : "visible GPUs", nproc));
    }
    if (info.launcher == Launcher::none && !env.get_nonempty("MASTER_ADDR")) {
      if (auto port = env.get_nonempty("MASTER_PORT")) {
        LaunchInfo scratch;
        Vars vars(env, Launcher::none, scratch);
        auto parsed = vars.parse("MASTER_PORT", *port, 1, 65535);
        if (!parsed) return parsed.error();
        info.master_port = static_cast<std::uint16_t>(*parsed);
        info.sources.push_back("MASTER_PORT=" + *port);
      }
    }
  } else if (options.nproc_per_node) {
    if (info.launcher == Launcher::epkit_spawn) {
      return flag_error("--nproc-per-node inside a rank epkit spawned (nested spawn)");
    }
    info.spawn = true;
    info.node_rank = info.rank;
    info.nnodes = info.world_size;
    info.local_world_size = *options.nproc_per_node;
    info.local_rank = 0;
    info.world_size = info.nnodes * info.local_world_size;
    info.rank = info.node_rank * info.local_world_size;
    info.sources.push_back(
        fmt::format("--nproc-per-node={} (launcher rank = node rank)", info.local_world_size));
  }
  if (info.spawn && info.world_size > k_max_world) {
    return flag_error(
        fmt::format("{} nodes x {} ranks is too many", info.nnodes, info.local_world_size));
  }
  if (auto ok = check_consistent(info); !ok) return ok.error();
  if (options.share_gpus) {
    info.share_gpus = true;
    info.sources.push_back("--oversubscribe");
  } else if (auto share = env.get_nonempty(k_share_gpus_var)) {
    if (*share != "0" && *share != "1") {
      return make_error(ErrorCode::invalid,
                        fmt::format("{}='{}': must be 0 or 1", k_share_gpus_var, *share));
    }
    info.share_gpus = *share == "1";
    info.sources.push_back(fmt::format("{}={}", k_share_gpus_var, *share));
  }
  return info;
}

std::map<std::string, std::string> child_env(const LaunchInfo& agent, int local_rank) {
  std::map<std::string, std::string> vars{
      {"EPKIT_SPAWNED", "1"},
      {"EPKIT_PARENT_LAUNCHER", to_string(agent.launcher)},
      {"RANK", std::to_string(agent.rank + local_rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(agent.world_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(agent.local_world_size)},
      {"EPKIT_NODE_RANK", std::to_string(agent.node_rank)},
      {"EPKIT_NNODES", std::to_string(agent.nnodes)},
      {"MASTER_ADDR", agent.master_addr},
      {"MASTER_PORT", std::to_string(agent.master_port)},
  };
  if (agent.share_gpus) vars[k_share_gpus_var] = "1";
  return vars;
}

}  // namespace epkit::runtime
