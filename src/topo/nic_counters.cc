#include "topo/nic_counters.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>

#include "topo/model.h"

namespace epkit::topo {

namespace {

constexpr std::string_view k_ib_class = "/sys/class/infiniband";
// A 32-bit PortCounters data counter stops here instead of wrapping.
constexpr std::uint64_t k_saturated32 = 0xFFFFFFFFull;
// port_xmit_data and port_rcv_data count 4-octet units.
constexpr std::uint64_t k_octets_per_unit = 4;

// A decimal counter file; the error names the file.
Result<std::uint64_t> read_u64(const host::Sysroot& fs, const std::string& path) {
  auto text = fs.read_trimmed(path);
  if (!text) return text.error();
  std::uint64_t value = 0;
  const char* end = text->data() + text->size();
  auto [ptr, ec] = std::from_chars(text->data(), end, value, 10);
  if (ec != std::errc() || ptr != end || text->empty()) {
    return make_error(ErrorCode::invalid, fmt::format("{}: '{}' is not a counter", path, *text));
  }
  return value;
}

// The Ethernet interface of one port: the device's only interface, or, when it
// has several, the one the port's default GID belongs to.
Result<std::string> port_netdev(const host::Sysroot& fs, const std::string& dev_dir,
                                const std::string& port_dir) {
  std::vector<std::string> netdevs;
  if (auto names = fs.list(dev_dir + "/device/net")) netdevs = std::move(*names);
  if (netdevs.size() == 1) return netdevs.front();
  if (auto ndev = fs.read_trimmed(port_dir + "/gid_attrs/ndevs/0"); ndev && !ndev->empty()) {
    return *ndev;
  }
  if (netdevs.empty()) {
    return make_error(ErrorCode::not_found,
                      fmt::format("no Ethernet interface under {}/device/net", dev_dir));
  }
  return make_error(ErrorCode::invalid,
                    fmt::format("{} has several interfaces ({}) and the port's GID names none",
                                dev_dir, fmt::join(netdevs, ",")));
}

void read_port_counters(const host::Sysroot& fs, const std::string& port_dir, NicCounter& c) {
  c.source = CounterSource::rdma_port;
  c.tx_path = port_dir + "/counters/port_xmit_data";
  c.rx_path = port_dir + "/counters/port_rcv_data";
  auto tx = read_u64(fs, c.tx_path);
  auto rx = read_u64(fs, c.rx_path);
  if (!tx || !rx) {
    c.unknown = (!tx ? tx : rx).error().message;
    return;
  }
  if (*tx == k_saturated32 || *rx == k_saturated32) {
    c.unknown = fmt::format(
        "{} stopped at 2^32-1: a 32-bit counter that saturated (reset it, or the HCA has no "
        "extended counters)",
        *tx == k_saturated32 ? c.tx_path : c.rx_path);
    return;
  }
  constexpr std::uint64_t k_max_units =
      std::numeric_limits<std::uint64_t>::max() / k_octets_per_unit;
  if (*tx > k_max_units || *rx > k_max_units) {
    c.unknown = fmt::format("{}: value too large to be bytes / 4", c.tx_path);
    return;
  }
  c.tx_bytes = *tx * k_octets_per_unit;
  c.rx_bytes = *rx * k_octets_per_unit;
}

void read_netdev_counters(const host::Sysroot& fs, const std::string& netdev, NicCounter& c) {
  c.source = CounterSource::netdev;
  c.netdev = netdev;
  c.tx_path = "/sys/class/net/" + netdev + "/statistics/tx_bytes";
  c.rx_path = "/sys/class/net/" + netdev + "/statistics/rx_bytes";
  auto tx = read_u64(fs, c.tx_path);
  auto rx = read_u64(fs, c.rx_path);
  if (!tx || !rx) {
    c.unknown = (!tx ? tx : rx).error().message;
    return;
  }
  c.tx_bytes = *tx;
  c.rx_bytes = *rx;
}

NicCounter read_port(const host::Sysroot& fs, const std::string& dev, int port,
                     const std::string& port_name) {
  const std::string dev_dir = fmt::format("{}/{}", k_ib_class, dev);
  const std::string port_dir = dev_dir + "/ports/" + port_name;
  NicCounter c;
  c.nic = dev;
  c.port = port;
  read_port_counters(fs, port_dir, c);
  if (c.unknown.empty()) return c;
  // Only a missing port counter falls back; an unreadable or odd one is
  // reported as it is rather than replaced by a weaker source.
  if (fs.exists(c.tx_path) && fs.exists(c.rx_path)) return c;
  std::string port_reason = c.unknown;
  auto netdev = port_netdev(fs, dev_dir, port_dir);
  if (!netdev) {
    c.unknown = fmt::format("{}; {}", port_reason, netdev.error().message);
    return c;
  }
  NicCounter fallback;
  fallback.nic = dev;
  fallback.port = port;
  read_netdev_counters(fs, *netdev, fallback);
  if (!fallback.unknown.empty()) {
    fallback.unknown = fmt::format("{}; {}", port_reason, fallback.unknown);
  }
  return fallback;
}

std::optional<int> port_number(const std::string& name) {
  int value = 0;
  const char* end = name.data() + name.size();
  auto [ptr, ec] = std::from_chars(name.data(), end, value, 10);
  if (ec != std::errc() || ptr != end || name.empty()) return std::nullopt;
  return value;
}

}  // namespace

const char* to_string(CounterSource source) {
  switch (source) {
    case CounterSource::none:
      return "none";
    case CounterSource::rdma_port:
      return "port counters";
    case CounterSource::netdev:
      return "netdev";
  }
  return "?";
}

NicCounterSnapshot read_nic_counters(const host::Sysroot& fs) {
  NicCounterSnapshot snap;
  auto devices = fs.list(k_ib_class);
  if (!devices) {
    snap.note = devices.error().code == ErrorCode::not_found
                    ? fmt::format("no {} on this node (no RDMA device)", k_ib_class)
                    : devices.error().message;
    return snap;
  }
  std::sort(devices->begin(), devices->end(), natural_less);
  for (const auto& dev : *devices) {
    const std::string ports_dir = fmt::format("{}/{}/ports", k_ib_class, dev);
    auto ports = fs.list(ports_dir);
    if (!ports) {
      NicCounter c;
      c.nic = dev;
      c.unknown = ports.error().message;
      snap.ports.push_back(std::move(c));
      continue;
    }
    std::vector<std::pair<int, std::string>> numbered;
    for (const auto& p : *ports) {
      if (auto n = port_number(p)) numbered.emplace_back(*n, p);
    }
    std::sort(numbered.begin(), numbered.end());
    for (const auto& [n, name] : numbered) snap.ports.push_back(read_port(fs, dev, n, name));
  }
  if (snap.ports.empty()) snap.note = fmt::format("{} lists no device port", k_ib_class);
  return snap;
}

std::vector<NicTraffic> traffic_between(const NicCounterSnapshot& before,
                                        const NicCounterSnapshot& after) {
  std::vector<NicTraffic> out;
  for (const auto& a : after.ports) {
    NicTraffic t;
    t.nic = a.nic;
    t.port = a.port;
    t.source = a.source;
    t.netdev = a.netdev;
    t.source_path = a.tx_path;
    auto it = std::find_if(before.ports.begin(), before.ports.end(),
                           [&](const NicCounter& b) { return b.nic == a.nic && b.port == a.port; });
    if (it == before.ports.end()) {
      t.unknown = "the port appeared during the run (no reading before it)";
    } else if (!it->unknown.empty()) {
      t.unknown = "before the run: " + it->unknown;
    } else if (!a.unknown.empty()) {
      t.unknown = "after the run: " + a.unknown;
    } else if (it->source != a.source || it->netdev != a.netdev) {
      t.unknown =
          fmt::format("read from {} before the run and from {} after it",
                      it->source == CounterSource::netdev ? it->netdev : to_string(it->source),
                      a.source == CounterSource::netdev ? a.netdev : to_string(a.source));
    } else if (*a.tx_bytes < *it->tx_bytes || *a.rx_bytes < *it->rx_bytes) {
      bool tx_back = *a.tx_bytes < *it->tx_bytes;
      t.unknown = fmt::format(
          "{} went backwards ({} -> {} bytes): the counter was reset or wrapped during the run",
          tx_back ? a.tx_path : a.rx_path, tx_back ? *it->tx_bytes : *it->rx_bytes,
          tx_back ? *a.tx_bytes : *a.rx_bytes);
    } else {
      t.tx_bytes = *a.tx_bytes - *it->tx_bytes;
      t.rx_bytes = *a.rx_bytes - *it->rx_bytes;
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace epkit::topo
