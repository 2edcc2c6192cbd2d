#include "topo/hca_list.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace epkit::topo {
namespace {

std::vector<std::string_view> split_commas(std::string_view value) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (true) {
    std::size_t next = value.find(',', pos);
    out.push_back(value.substr(pos, next == std::string_view::npos ? next : next - pos));
    if (next == std::string_view::npos) return out;
    pos = next + 1;
  }
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool parse_int(std::string_view text, int& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

int default_port(const RdmaNic& nic) {
  for (const auto& p : nic.ports) {
    if (p.state_code == 4) return p.port;
  }
  return nic.ports.empty() ? 1 : nic.ports.front().port;
}

bool has_port(const RdmaNic& nic, int port) {
  return std::any_of(nic.ports.begin(), nic.ports.end(),
                     [&](const IbPort& p) { return p.port == port; });
}

}  // namespace

std::vector<std::string> resolve_hca_filter(const DeviceFilter& filter, const Snapshot& snap) {
  std::vector<std::string> out;
  auto add = [&](std::string entry) {
    if (std::find(out.begin(), out.end(), entry) == out.end()) out.push_back(std::move(entry));
  };
  if (filter.exclude || filter.entries.empty()) {
    for (const auto& nic : snap.nics) {
      if (nic.ports.empty() && filter.selects(nic.name)) add(fmt::format("{}:1", nic.name));
      for (const auto& p : nic.ports) {
        if (filter.selects(nic.name, p.port)) {
          add(fmt::format("{}:{}", nic.name, p.port));
          break;
        }
      }
    }
    return out;
  }
  for (const auto& entry : filter.entries) {
    for (const auto& nic : snap.nics) {
      if (!filter.entry_matches(entry, nic.name)) continue;
      if (entry.port > 0 && !has_port(nic, entry.port)) continue;
      add(fmt::format("{}:{}", nic.name, entry.port > 0 ? entry.port : default_port(nic)));
    }
  }
  return out;
}

Result<std::vector<HcaMapping>> parse_device_to_hca_mapping(std::string_view value) {
  std::vector<HcaMapping> out;
  for (auto entry : split_commas(trim(value))) {
    entry = trim(entry);
    auto bad = [&](std::string_view why) {
      return make_error(ErrorCode::invalid,
                        fmt::format("entry '{}' {} (expected gpu:hca:port, e.g. 0:mlx5_0:1)",
                                    std::string(entry), why));
    };
    auto first = entry.find(':');
    auto last = entry.rfind(':');
    if (first == std::string_view::npos || first == last) return bad("is not gpu:hca:port");
    HcaMapping m;
    m.hca = std::string(entry.substr(first + 1, last - first - 1));
    if (!parse_int(entry.substr(0, first), m.gpu) || m.gpu < 0) return bad("has no GPU number");
    if (m.hca.empty() || m.hca.find(':') != std::string::npos) return bad("has no HCA name");
    if (!parse_int(entry.substr(last + 1), m.port) || m.port <= 0) return bad("has no port number");
    if (std::any_of(out.begin(), out.end(), [&](const HcaMapping& o) { return o.gpu == m.gpu; })) {
      return bad("lists a GPU a second time");
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace epkit::topo
