#include "runtime/nccl_transports.h"

#include <charconv>

namespace epkit::runtime {
namespace {

// Reads "<digits>[<anything>]" at the front of s; the rank is the digits.
bool take_rank(std::string_view& s, int& rank) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), rank);
  if (ec != std::errc() || end == s.data()) return false;
  s.remove_prefix(static_cast<std::size_t>(end - s.data()));
  if (s.empty() || s.front() != '[') return false;
  auto close = s.find(']');
  if (close == std::string_view::npos) return false;
  s.remove_prefix(close + 1);
  return true;
}

}  // namespace

bool parse_transport_line(std::string_view line, PeerTransports& out) {
  auto channel = line.find("Channel ");
  if (channel == std::string_view::npos) return false;
  auto colon = line.find(" : ", channel);
  if (colon == std::string_view::npos) return false;
  std::string_view s = line.substr(colon + 3);
  int from = 0;
  int to = 0;
  if (!take_rank(s, from)) return false;
  if (s.substr(0, 4) != " -> ") return false;
  s.remove_prefix(4);
  if (!take_rank(s, to)) return false;
  // Network connections name their side: "1[1] -> 2[0] [send] via NET/...".
  for (std::string_view side : {" [send]", " [receive]"}) {
    if (s.substr(0, side.size()) == side) s.remove_prefix(side.size());
  }
  if (s.substr(0, 5) != " via ") return false;
  s.remove_prefix(5);
  auto end = s.find_first_of(" \t\r\n");
  std::string transport(s.substr(0, end));
  if (transport.empty()) return false;
  auto& slot = out[{from, to}];
  if (slot.empty()) {
    slot = transport;
  } else if (("," + slot + ",").find(transport) == std::string::npos) {
    slot += ", " + transport;
  }
  return true;
}

PeerTransports parse_transports(std::string_view text) {
  PeerTransports out;
  while (!text.empty()) {
    auto nl = text.find('\n');
    parse_transport_line(text.substr(0, nl), out);
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

}  // namespace epkit::runtime
