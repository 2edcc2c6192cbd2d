// epkit place: topology-ordered node ranks for a Kubernetes Indexed Job or
// JobSet, without ssh (runtime/placement.h). Every pod runs it once before
// the job; `--format sh` prints the node rank and rendezvous the later
// commands take (--node-rank, --master), docs/deploy.md shows the pod script.
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <ostream>

#include "cli/command.h"
#include "env/shell.h"
#include "runtime/auth.h"
#include "runtime/launch.h"
#include "runtime/placement.h"

namespace epkit::cli {
namespace {

struct PlaceOptions {
  CommonOptions common;
  std::string format = "text";
  std::optional<int> index;
  std::optional<int> nnodes;
  std::optional<std::string> master;
  std::optional<int> port;
  std::string addr;
  double timeout_s = 300;
};

// A week: longer is a typo (1e10 s once overflowed the deadline to 0 s).
constexpr double k_max_timeout_s = 7 * 24 * 3600;

// A whole non-negative number from the environment, or an error naming it.
Result<std::optional<int>> env_int(const host::Env& env, const char* name) {
  auto text = env.get_nonempty(name);
  if (!text) return std::optional<int>{};
  int value = -1;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || end != text->data() + text->size() || value < 0) {
    return make_error(ErrorCode::invalid,
                      fmt::format("{}='{}' is not a non-negative integer", name, *text));
  }
  return std::optional<int>{value};
}

int run_place(const PlaceOptions& opts, Io& io) {
  auto usage = [&io](const std::string& message) {
    io.err << "epkit place: " << message << "\n";
    return k_exit_usage;
  };
  auto host = make_host(opts.common);
  if (!host) return usage(host.error().message);
  const auto& env = host->env();
  auto index = env_int(env, "JOB_COMPLETION_INDEX");
  auto nnodes = env_int(env, "NNODES");
  auto master_port = env_int(env, "MASTER_PORT");
  for (const auto* r : {&index, &nnodes, &master_port}) {
    if (!*r) return usage(r->error().message);
  }
  if (master_port->has_value() && (**master_port < 1 || **master_port > 65535)) {
    return usage(fmt::format("MASTER_PORT={} is not 1..65535", **master_port));
  }
  int my_index = opts.index.value_or(index->value_or(-1));
  int n = opts.nnodes.value_or(nnodes->value_or(0));
  if (my_index < 0) return usage("no index: set JOB_COMPLETION_INDEX or --index");
  if (n < 1) return usage("no node count: set NNODES or --nnodes");
  if (n > runtime::k_max_nodes) {
    return usage(fmt::format("{} nodes: at most {}", n, runtime::k_max_nodes));
  }
  if (my_index >= n) {
    return usage(fmt::format("index {} is not below the node count {}", my_index, n));
  }
  if (!std::isfinite(opts.timeout_s) || opts.timeout_s <= 0 || opts.timeout_s > k_max_timeout_s) {
    return usage(fmt::format("--timeout must be a number of seconds in (0, {}]", k_max_timeout_s));
  }
  auto secret = runtime::load_secret(env);
  if (!secret) return usage(secret.error().message);
  std::string master = opts.master.value_or(env.get_nonempty("MASTER_ADDR").value_or(""));
  if (master.empty()) return usage("no rendezvous host: set MASTER_ADDR or --master");
  auto endpoint = runtime::parse_endpoint(
      master, static_cast<std::uint16_t>(master_port->value_or(runtime::k_default_master_port)));
  if (!endpoint) return usage("--master " + endpoint.error().message);
  // Named in messages and resolved: address characters only.
  if (auto ok = runtime::check_placement_value("the rendezvous host (--master, MASTER_ADDR)",
                                               endpoint->first);
      !ok || endpoint->first.empty()) {
    return usage("the rendezvous host (--master, MASTER_ADDR) must be a host name or address");
  }
  // The job's own store later listens on the master port of the node ranked
  // 0; the placement store uses the next port so the two never collide.
  int port = opts.port.value_or(endpoint->second + 1);
  // 0 (any free port) only works when nobody else has to find it.
  if (port < (n == 1 ? 0 : 1) || port > 65535) {
    return usage(fmt::format("--port {} is not 1..65535", port));
  }
  std::string addr =
      opts.addr.empty() ? env.get_nonempty("EPKIT_NODE_ADDR").value_or("") : opts.addr;
  if (addr.empty()) return usage("no address for this node: set EPKIT_NODE_ADDR or --addr");
  if (n > 1 && secret->empty()) {
    // Said once, on stderr: the job still runs (a lab behind a firewall).
    io.err << "epkit place: warning: no EPKIT_SECRET_FILE or EPKIT_SECRET: any host that reaches "
              "the rendezvous port can join or disturb the placement (docs/deploy.md)\n";
  }

  auto self = runtime::placement_from_env(env, my_index, addr);
  if (!self) return usage(self.error().message);
  runtime::ExchangeOptions exchange;
  exchange.nnodes = n;
  exchange.master_addr = endpoint->first;
  exchange.port = static_cast<std::uint16_t>(port);
  // Index 0 listens on its own address only (the pod IP, or the name the
  // others reach it by), not on every interface.
  exchange.bind_addr = addr;
  exchange.secret = *secret;
  auto order = runtime::exchange_placements(*self, exchange,
                                            runtime::Deadline::after_seconds(opts.timeout_s));
  if (!order) {
    io.err << "epkit place: " << order.error().message << "\n";
    return k_exit_fail;
  }
  int rank = order->node_rank_of(my_index);
  if (rank < 0 || order->nodes.empty()) {
    // decode_outcome admits no such order; never exit 0 without a rank.
    io.err << "epkit place: this node is not in the published order\n";
    return k_exit_fail;
  }
  const auto& first = order->nodes.front();
  std::string rendezvous = first.addr.find(':') != std::string::npos
                               ? fmt::format("[{}]:{}", first.addr, endpoint->second)
                               : fmt::format("{}:{}", first.addr, endpoint->second);
  auto& table_out = opts.format == "text" ? io.out : io.err;
  if (my_index == 0) {
    table_out << fmt::format("epkit place: {} nodes in topology order (block, subblock, host)\n", n)
              << order->describe();
  }
  table_out << fmt::format("epkit place: index {} is node rank {} of {}; rendezvous {}\n", my_index,
                           rank, n, rendezvous);
  if (opts.format == "sh") {
    // Sourced by the pod script: every value is one shell word, whatever a
    // node published (the placement's values are checked too).
    io.out << fmt::format("export EPKIT_NODE_RANK={}\nexport EPKIT_NNODES={}\n", rank, n)
           << fmt::format("export EPKIT_MASTER={}\n", epkit::env::shell_word(rendezvous));
  } else if (opts.format == "json") {
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& p : order->nodes) {
      nodes.push_back({{"index", p.index},
                       {"addr", p.addr},
                       {"node", p.node},
                       {"block", p.block},
                       {"subblock", p.subblock},
                       {"host", p.physical_host}});
    }
    io.out << nlohmann::json{{"index", my_index},
                             {"node_rank", rank},
                             {"nnodes", n},
                             {"master", rendezvous},
                             {"order", std::move(nodes)}}
                  .dump(2)
           << "\n";
  }
  return k_exit_ok;
}

}  // namespace

Command make_place_command() {
  return {
      "place",
      "Order the nodes of a Kubernetes Indexed Job/JobSet by topology (no ssh) and print this "
      "node's rank",
      [](CLI::App& app) -> Runner {
        auto opts = std::make_shared<PlaceOptions>();
        add_env_file_option(app, opts->common);
        app.add_option("--format", opts->format,
                       "text (the order), sh (export lines for the pod script) or json")
            ->check(CLI::IsMember({"text", "sh", "json"}))
            ->type_name("FORMAT");
        app.add_option("--index", opts->index, "This node's index (default: JOB_COMPLETION_INDEX)");
        app.add_option("--nnodes", opts->nnodes, "Nodes in the job (default: NNODES)");
        app.add_option("--master", opts->master,
                       "Index 0's host[:port] (default: MASTER_ADDR, MASTER_PORT)");
        app.add_option("--port", opts->port,
                       "Port of the placement rendezvous (default: the master port + 1)");
        app.add_option("--addr", opts->addr,
                       "Where the others reach this node (default: EPKIT_NODE_ADDR)");
        app.add_option("--timeout", opts->timeout_s,
                       "Seconds to wait for every node's placement (at most a week)");
        app.footer(
            "Placement from EPKIT_TOPOLOGY_BLOCK, EPKIT_TOPOLOGY_SUBBLOCK, EPKIT_TOPOLOGY_HOST "
            "(GKE's cloud.google.com/gce-topology-* node labels) and EPKIT_NODE_NAME.\n"
            "The rendezvous secret from EPKIT_SECRET_FILE or EPKIT_SECRET (the same on every "
            "node; docs/deploy.md).\n"
            "Exit codes: 0 ordered, 2 a node never reported (named) or the rendezvous "
            "failed, 64 bad usage.");
        return [opts](Io& io) { return run_place(*opts, io); };
      }};
}

}  // namespace epkit::cli
