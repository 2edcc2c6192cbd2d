// The placement's JSON: a node's own placement, and index 0's outcome (the
// order or its error). Both arrive from other nodes, so decoding checks
// every field (types, characters, index range, counts) and never throws; the
// fuzz target tests/fuzz/placement_fuzz.cc runs it on arbitrary bytes.
#include <fmt/format.h>

#include <set>

#include "runtime/peer_json.h"
#include "runtime/placement.h"

namespace epkit::runtime {

using peer::Json;

Result<void> check_placement_value(std::string_view name, std::string_view value) {
  if (value.size() > k_max_placement_value) {
    return make_error(ErrorCode::invalid,
                      fmt::format("placement: {} is {} characters long (at most {})", name,
                                  value.size(), k_max_placement_value));
  }
  for (char c : value) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_' || c == ':';
    if (!ok) {
      // The value itself is not repeated: it may hold terminal escapes.
      return make_error(ErrorCode::invalid,
                        fmt::format("placement: {} holds a character other than letters, digits "
                                    "and . _ : - (whitespace, a control or shell character?)",
                                    name));
    }
  }
  return {};
}

namespace {

Json to_json(const Placement& p) {
  return Json{{"index", p.index}, {"addr", p.addr},         {"node", p.node},
              {"block", p.block}, {"subblock", p.subblock}, {"host", p.physical_host}};
}

// Shared by decode_placement and decode_outcome: one placement object.
Result<Placement> parse_one(const Json& doc, int max_index) {
  if (!doc.is_object()) return make_error(ErrorCode::invalid, "placement: not a JSON object");
  Placement p;
  auto index = peer::int_field(doc, "index", 0, max_index);
  if (!index) {
    return make_error(ErrorCode::invalid,
                      fmt::format("placement: no integer 'index' in 0..{}", max_index));
  }
  p.index = static_cast<int>(*index);
  struct Field {
    const char* key;
    std::string* value;
  };
  for (auto [key, value] :
       {Field{"addr", &p.addr}, Field{"node", &p.node}, Field{"block", &p.block},
        Field{"subblock", &p.subblock}, Field{"host", &p.physical_host}}) {
    const Json* v = peer::field(doc, key);
    if (v == nullptr || !v->is_string()) {
      return make_error(ErrorCode::invalid, fmt::format("placement: no string '{}'", key));
    }
    const auto& text = v->get_ref<const std::string&>();
    if (auto ok = check_placement_value(key, text); !ok) return ok.error();
    *value = text;
  }
  if (p.addr.empty()) return make_error(ErrorCode::invalid, "placement: an empty 'addr'");
  return p;
}

}  // namespace

std::string encode(const Placement& p) {
  // Values are checked on the way in; replace keeps a bad one from throwing.
  return to_json(p).dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<Placement> decode_placement(std::string_view text, int max_index) {
  auto doc = peer::parse(text, 4096);
  if (doc.is_discarded()) return make_error(ErrorCode::invalid, "placement: not JSON");
  return parse_one(doc, max_index);
}

std::string encode_outcome(const Result<NodeOrder>& order) {
  Json outcome;
  if (order) {
    Json nodes = Json::array();
    for (const auto& p : order->nodes) nodes.push_back(to_json(p));
    outcome = {{"order", std::move(nodes)}};
  } else {
    outcome = {{"error", order.error().message}, {"code", static_cast<int>(order.error().code)}};
  }
  return outcome.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<NodeOrder> decode_outcome(std::string_view text, int nnodes) {
  auto forged = [](std::string_view why) {
    return make_error(ErrorCode::invalid,
                      fmt::format("placement: index 0 published a malformed outcome ({})", why));
  };
  if (nnodes < 1 || nnodes > k_max_nodes) return forged("node count out of range");
  auto doc = peer::parse(text, static_cast<std::size_t>(nnodes) * 2048 + 4096);
  if (doc.is_discarded() || !doc.is_object()) return forged("not a JSON object");
  bool has_error = peer::field(doc, "error") != nullptr;
  bool has_order = peer::field(doc, "order") != nullptr;
  if (has_error == has_order) return forged("neither or both of 'error' and 'order'");
  if (has_error) {
    auto message = peer::string_field(doc, "error");
    auto code = peer::int_field(doc, "code", 0, static_cast<int>(ErrorCode::internal));
    if (!message || message->empty() || !code) return forged("a bad 'error' or 'code'");
    return make_error(static_cast<ErrorCode>(*code), *message + " (as index 0 saw it)");
  }
  const Json* order = peer::field(doc, "order");
  if (!order->is_array()) return forged("'order' is not an array");
  if (order->size() != static_cast<std::size_t>(nnodes)) {
    return forged(fmt::format("{} nodes in the order, the job has {}", order->size(), nnodes));
  }
  std::vector<Placement> nodes;
  std::set<int> seen;
  for (const auto& node : *order) {
    auto p = parse_one(node, nnodes - 1);
    if (!p) return forged(p.error().message);
    if (!seen.insert(p->index).second) return forged(fmt::format("index {} twice", p->index));
    nodes.push_back(std::move(*p));
  }
  // nnodes distinct indexes in 0..nnodes-1: every node is in the order once.
  return NodeOrder{std::move(nodes)};
}

}  // namespace epkit::runtime
