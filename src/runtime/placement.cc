#include "runtime/placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <tuple>

#include "runtime/store.h"

namespace epkit::runtime {
namespace {

Result<void> check_value(std::string_view name, std::string_view value) {
  if (value.size() > 253) {
    return make_error(
        ErrorCode::invalid,
        fmt::format("placement: {} is {} characters long (at most 253)", name, value.size()));
  }
  for (char c : value) {
    auto u = static_cast<unsigned char>(c);
    if (u <= ' ' || u == 0x7f) {
      return make_error(
          ErrorCode::invalid,
          fmt::format("placement: {}='{}' holds whitespace or a control character", name, value));
    }
  }
  return {};
}

std::string key_of(int index) {
  return fmt::format("placement/{}", index);
}

// Unlabelled sorts after labelled at the same level.
auto level(const std::string& value) {
  return std::make_tuple(value.empty(), value);
}

std::string or_dash(const std::string& value) {
  return value.empty() ? "-" : value;
}

}  // namespace

Result<Placement> placement_from_env(const host::Env& env, int index, std::string addr) {
  Placement p;
  p.index = index;
  p.addr = std::move(addr);
  struct Field {
    const char* name;
    std::string* value;
  };
  for (auto [name, value] :
       {Field{"EPKIT_TOPOLOGY_BLOCK", &p.block}, Field{"EPKIT_TOPOLOGY_SUBBLOCK", &p.subblock},
        Field{"EPKIT_TOPOLOGY_HOST", &p.physical_host}, Field{"EPKIT_NODE_NAME", &p.node}}) {
    *value = env.get_nonempty(name).value_or("");
    if (auto ok = check_value(name, *value); !ok) return ok.error();
  }
  if (auto ok = check_value("address", p.addr); !ok) return ok.error();
  if (p.addr.empty()) return make_error(ErrorCode::invalid, "placement: this node has no address");
  return p;
}

std::string encode(const Placement& p) {
  return nlohmann::json{{"index", p.index}, {"addr", p.addr},         {"node", p.node},
                        {"block", p.block}, {"subblock", p.subblock}, {"host", p.physical_host}}
      .dump();
}

Result<Placement> decode_placement(std::string_view text) {
  auto doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return make_error(ErrorCode::invalid, "placement: not a JSON object: " + std::string(text));
  }
  Placement p;
  if (!doc.contains("index") || !doc["index"].is_number_integer() || doc["index"].get<int>() < 0) {
    return make_error(ErrorCode::invalid,
                      "placement: no non-negative integer 'index' in " + std::string(text));
  }
  p.index = doc["index"].get<int>();
  struct Field {
    const char* key;
    std::string* value;
  };
  for (auto [key, value] :
       {Field{"addr", &p.addr}, Field{"node", &p.node}, Field{"block", &p.block},
        Field{"subblock", &p.subblock}, Field{"host", &p.physical_host}}) {
    if (!doc.contains(key) || !doc[key].is_string()) {
      return make_error(ErrorCode::invalid,
                        fmt::format("placement: no string '{}' in {}", key, text));
    }
    *value = doc[key].get<std::string>();
    if (auto ok = check_value(key, *value); !ok) return ok.error();
  }
  return p;
}

int NodeOrder::node_rank_of(int index) const {
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].index == index) return static_cast<int>(i);
  }
  return -1;
}

std::string NodeOrder::describe() const {
  std::string out = fmt::format("{:<9} {:<6} {:<14} {:<14} {:<16} {:<24} {}\n", "node-rank",
                                "index", "block", "subblock", "host", "node", "address");
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto& p = nodes[i];
    out += fmt::format("{:<9} {:<6} {:<14} {:<14} {:<16} {:<24} {}\n", i, p.index, or_dash(p.block),
                       or_dash(p.subblock), or_dash(p.physical_host), or_dash(p.node), p.addr);
  }
  return out;
}

Result<NodeOrder> order_nodes(std::vector<Placement> placements) {
  std::set<int> seen;
  for (const auto& p : placements) {
    if (!seen.insert(p.index).second) {
      return make_error(ErrorCode::invalid,
                        fmt::format("placement: index {} reported twice", p.index));
    }
  }
  std::sort(placements.begin(), placements.end(), [](const Placement& a, const Placement& b) {
    return std::make_tuple(level(a.block), level(a.subblock), level(a.physical_host), a.node,
                           a.index) < std::make_tuple(level(b.block), level(b.subblock),
                                                      level(b.physical_host), b.node, b.index);
  });
  return NodeOrder{std::move(placements)};
}

namespace {

// Index 0: waits for every node's placement and orders them.
Result<NodeOrder> collect(Store& store, int nnodes, Deadline deadline) {
  std::vector<std::string> keys;
  for (int i = 0; i < nnodes; ++i) keys.push_back(key_of(i));
  if (auto ok = store.wait(keys, deadline); !ok) {
    return make_error(ok.error().code,
                      "placement: not every node reported its placement (the key of a node is "
                      "placement/<JOB_COMPLETION_INDEX>): " +
                          ok.error().message);
  }
  std::vector<Placement> placements;
  for (const auto& key : keys) {
    auto value = store.get(key, deadline);
    if (!value) return make_error(value.error().code, "placement: " + value.error().message);
    auto p = decode_placement(*value);
    if (!p) return p.error();
    if (key != key_of(p->index)) {
      return make_error(ErrorCode::invalid,
                        fmt::format("placement: {} holds index {}", key, p->index));
    }
    placements.push_back(std::move(*p));
  }
  return order_nodes(std::move(placements));
}

// The other nodes: wait for index 0's outcome and take it as their own.
// Index 0 publishes one by its own deadline, and a lost index 0 fails the
// wait at once, so the others wait past their deadline (pods start at
// different times): a node that gave up first would leave without saying
// goodbye and be blamed instead of the node that never came.
Result<NodeOrder> await_order(Store& store, Deadline own) {
  auto deadline = Deadline::after(own.remaining() * 2 + Millis(10000));
  if (auto ok = store.add("placement/reported", 1, deadline); !ok) {
    return make_error(ok.error().code, "placement: " + ok.error().message);
  }
  auto text = store.get("placement/outcome", deadline);
  if (!text) return make_error(text.error().code, "placement: " + text.error().message);
  (void)store.add("placement/read", 1, deadline);
  store.close();
  auto doc = nlohmann::json::parse(*text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return make_error(ErrorCode::invalid, "placement: index 0 published " + *text);
  }
  if (doc.contains("error")) {
    auto code = doc.value("code", static_cast<int>(ErrorCode::internal));
    return make_error(static_cast<ErrorCode>(code),
                      doc["error"].get<std::string>() + " (as index 0 saw it)");
  }
  std::vector<Placement> placements;
  for (const auto& node : doc.value("order", nlohmann::json::array())) {
    auto p = decode_placement(node.dump());
    if (!p) return p.error();
    placements.push_back(std::move(*p));
  }
  return order_nodes(std::move(placements));
}

}  // namespace

Result<NodeOrder> exchange_placements(const Placement& self, const ExchangeOptions& options,
                                      Deadline deadline) {
  if (options.nnodes < 1 || self.index < 0 || self.index >= options.nnodes) {
    return make_error(ErrorCode::invalid, fmt::format("placement: index {} is not in 0..{}",
                                                      self.index, options.nnodes - 1));
  }
  std::unique_ptr<StoreServer> server;
  if (self.index == 0) {
    ServerOptions serve;
    serve.bind_addr = options.bind_addr;
    serve.port = options.port;
    serve.world_size = options.nnodes;
    serve.tag = options.tag;
    auto started = StoreServer::start(serve);
    if (!started) {
      return make_error(started.error().code,
                        "placement: serving the rendezvous: " + started.error().message);
    }
    server = std::move(*started);
  }
  ClientOptions client;
  client.host = options.master_addr;
  client.port = server ? server->port() : options.port;
  client.rank = self.index;
  client.world_size = options.nnodes;
  client.my_host = self.node.empty() ? self.addr : self.node;
  client.tag = options.tag;
  auto wrap = [](const Error& error) {
    return make_error(error.code, "placement: " + error.message);
  };
  auto store = Store::connect(client, deadline);
  if (!store) return wrap(store.error());
  if (auto ok = store->set(key_of(self.index), encode(self), deadline); !ok) {
    return wrap(ok.error());
  }
  if (self.index != 0) return await_order(*store, deadline);

  // Index 0 collects, orders and publishes the outcome, success or the
  // timeout naming who is missing, so that every node reports the same cause
  // instead of the others seeing the store vanish.
  auto order = collect(*store, options.nnodes, deadline);
  nlohmann::json outcome;
  if (order) {
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& p : order->nodes) nodes.push_back(nlohmann::json::parse(encode(p)));
    outcome = {{"order", std::move(nodes)}};
  } else {
    outcome = {{"error", order.error().message}, {"code", static_cast<int>(order.error().code)}};
  }
  // The others' deadlines differ from ours (pods start at different times):
  // give them a short grace to read the outcome before the server goes.
  auto grace = Deadline::after(Millis(5000));
  auto reported = store->add("placement/reported", 0, grace);
  if (store->set("placement/outcome", outcome.dump(), grace) && reported) {
    while (!grace.expired()) {
      auto read = store->add("placement/read", 0, grace);
      if (!read || *read >= *reported) break;
      std::this_thread::sleep_for(Millis(10));
    }
  }
  store->close();
  return order;
}

}  // namespace epkit::runtime
