#include "runtime/connectivity_result.h"

#include <fmt/format.h>

#include "runtime/peer_json.h"

namespace epkit::runtime {

nlohmann::json checked_connectivity_result(std::string_view text, int rank) {
  auto malformed = [rank](std::string_view why) {
    return nlohmann::json{
        {"rank", rank},
        {"label", fmt::format("rank {}", rank)},
        {"ok", false},
        {"reason", fmt::format("rank {} sent a malformed result ({})", rank, why)},
        {"transports", nlohmann::json::array()}};
  };
  auto doc = peer::parse(text);
  if (doc.is_discarded() || !doc.is_object()) return malformed("not a JSON object");
  auto claimed = peer::int_field(doc, "rank");
  if (!claimed || *claimed != rank) return malformed("another rank's number");
  auto ok = peer::bool_field(doc, "ok");
  if (!ok) return malformed("no boolean 'ok'");
  nlohmann::json out = {{"rank", rank}, {"ok", *ok}};
  for (const char* key :
       {"label", "reason", "gpu_name", "gpu_uuid", "gpu_pci_bus_id", "compute_capability"}) {
    auto value = peer::string_field(doc, key, 256);
    if (!value) return malformed(fmt::format("a bad '{}'", key));
    out[key] = std::move(*value);
  }
  for (const char* key : {"wrong_all_reduce", "wrong_ring"}) {
    auto count = peer::int_field(doc, key, 0);
    if (!count) return malformed(fmt::format("a bad '{}'", key));
    out[key] = *count;
  }
  nlohmann::json transports = nlohmann::json::array();
  const auto* list = peer::field(doc, "transports");
  if (list == nullptr || !list->is_array() || list->size() > 65536) {
    return malformed("a bad 'transports'");
  }
  for (const auto& t : *list) {
    auto from = peer::int_field(t, "from", 0, 1 << 20);
    auto to = peer::int_field(t, "to", 0, 1 << 20);
    auto transport = peer::string_field(t, "transport", 64);
    if (!from || !to || !transport) return malformed("a bad transport entry");
    transports.push_back({{"from", *from}, {"to", *to}, {"transport", std::move(*transport)}});
  }
  out["transports"] = std::move(transports);
  return out;
}

}  // namespace epkit::runtime
