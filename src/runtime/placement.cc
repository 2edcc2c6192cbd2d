#include "runtime/placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include "runtime/store.h"

namespace epkit::runtime {
namespace {

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
    if (auto ok = check_placement_value(name, *value); !ok) return ok.error();
  }
  if (auto ok = check_placement_value("address", p.addr); !ok) return ok.error();
  if (p.addr.empty()) return make_error(ErrorCode::invalid, "placement: this node has no address");
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
  // One wait names at most 512 keys (Store::wait): larger jobs wait in slices.
  constexpr std::size_t k_slice = 512;
  for (std::size_t first = 0; first < keys.size(); first += k_slice) {
    std::vector<std::string> slice(
        keys.begin() + static_cast<std::ptrdiff_t>(first),
        keys.begin() + static_cast<std::ptrdiff_t>(std::min(keys.size(), first + k_slice)));
    if (auto ok = store.wait(slice, deadline); !ok) {
      return make_error(ok.error().code,
                        "placement: not every node reported its placement (the key of a node is "
                        "placement/<JOB_COMPLETION_INDEX>): " +
                            ok.error().message);
    }
  }
  std::vector<Placement> placements;
  for (const auto& key : keys) {
    auto value = store.get(key, deadline);
    if (!value) return make_error(value.error().code, "placement: " + value.error().message);
    auto p = decode_placement(*value, nnodes - 1);
    if (!p) return make_error(p.error().code, key + ": " + p.error().message);
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
Result<NodeOrder> await_order(Store& store, const Placement& self, int nnodes, Deadline own) {
  auto deadline = Deadline::after(own.remaining() * 2 + Millis(10000));
  if (auto ok = store.add("placement/reported", 1, deadline); !ok) {
    return make_error(ok.error().code, "placement: " + ok.error().message);
  }
  auto text = store.get("placement/outcome", deadline);
  if (!text) return make_error(text.error().code, "placement: " + text.error().message);
  (void)store.add("placement/read", 1, deadline);
  store.close();
  auto order = decode_outcome(*text, nnodes);
  if (!order) return order.error();
  // The order holds every index once; this node's entry must be what it
  // reported, or the outcome is not index 0's answer to this job.
  const auto& mine = order->nodes[static_cast<std::size_t>(order->node_rank_of(self.index))];
  if (encode(mine) != encode(self)) {
    return make_error(ErrorCode::invalid,
                      "placement: index 0 published a placement for this node that differs from "
                      "the one it reported");
  }
  return order_nodes(std::move(order->nodes));
}

}  // namespace

Result<NodeOrder> exchange_placements(const Placement& self, const ExchangeOptions& options,
                                      Deadline deadline) {
  if (options.nnodes < 1 || options.nnodes > k_max_nodes || self.index < 0 ||
      self.index >= options.nnodes) {
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
    serve.secret = options.secret;
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
  client.secret = options.secret;
  auto wrap = [](const Error& error) {
    return make_error(error.code, "placement: " + error.message);
  };
  auto store = Store::connect(client, deadline);
  if (!store) return wrap(store.error());
  if (auto ok = store->set(key_of(self.index), encode(self), deadline); !ok) {
    return wrap(ok.error());
  }
  if (self.index != 0) return await_order(*store, self, options.nnodes, deadline);

  // Index 0 collects, orders and publishes the outcome, success or the
  // timeout naming who is missing, so that every node reports the same cause
  // instead of the others seeing the store vanish.
  auto order = collect(*store, options.nnodes, deadline);
  std::string outcome = encode_outcome(order);
  // The others' deadlines differ from ours (pods start at different times):
  // give them a short grace to read the outcome before the server goes.
  // On success every other node has published its placement and will read
  // the outcome (one may not have counted itself in "reported" yet: waiting
  // for only those that had would close the store under the last one). On
  // failure, those that reported so far.
  auto grace = Deadline::after(Millis(5000));
  if (store->set("placement/outcome", outcome, grace)) {
    while (!grace.expired()) {
      auto reported = store->add("placement/reported", 0, grace);
      auto read = store->add("placement/read", 0, grace);
      if (!reported || !read) break;
      std::int64_t readers = order ? options.nnodes - 1 : *reported;
      if (*read >= readers) break;
      std::this_thread::sleep_for(Millis(10));
    }
  }
  store->close();
  return order;
}

}  // namespace epkit::runtime
