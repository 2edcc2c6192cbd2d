// nccl.* checks: NCCL's network choice (NCCL_NET and the net plugin, gIB on
// GKE) and its interface filters (NCCL_SOCKET_IFNAME, NCCL_IB_HCA).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sstream>

#include "checks/check.h"
#include "checks/check_util.h"
#include "env/interfaces.h"
#include "env/shell.h"
#include "topo/device_filter.h"

namespace epkit::checks {
namespace {

using env::AddressBook;
using env::poor_interface;
using env::read_addresses;

constexpr std::string_view k_gib_root = "/usr/local/gib";
constexpr std::string_view k_gib_lib = "/usr/local/gib/lib64";
constexpr std::string_view k_gib_fix_env = "source /usr/local/gib/scripts/set_nccl_env.sh";

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? std::string("none") : out;
}

// Where NCCL's plugin loader would find its net plugin. NCCL_NET_PLUGIN (a
// comma list) names a file or path, tried as given and then, unless it is a
// path or a "lib*.so" name, as libnccl-net-<name>.so; unset means
// libnccl-net.so; "none" means no plugin.
struct PluginSearch {
  bool disabled = false;
  std::vector<std::string> tried;  // file names or paths
  std::string found;               // node path on the loader's path
  std::string found_off_path;      // node path in the gIB folder, not on the loader's path
  std::string unknown;             // a relative path we cannot resolve
};

PluginSearch find_net_plugin(const host::Host& host) {
  PluginSearch out;
  const auto& env = host.env();
  std::vector<std::string> names;
  if (auto plugin = env.get_nonempty("NCCL_NET_PLUGIN")) {
    std::stringstream list(*plugin);
    std::string name;
    while (std::getline(list, name, ',')) {
      if (name.empty()) continue;
      if (iequals(name, "none")) {
        out.disabled = true;
        return out;
      }
      names.push_back(name);
      // NCCL adds its prefix unless the name is a path or already "lib*.so".
      bool library_name = name.starts_with("lib") && name.ends_with(".so");
      if (name.find('/') == std::string::npos && !library_name) {
        names.push_back("libnccl-net-" + name + ".so");
      }
    }
  } else {
    names.push_back("libnccl-net.so");
  }
  std::vector<std::string> dirs = loader_dirs(env);
  for (const auto& name : names) {
    out.tried.push_back(name);
    if (name.find('/') != std::string::npos) {
      if (name.front() != '/') {
        out.unknown = name;
      } else if (out.found.empty() && host.fs().exists(name)) {
        out.found = name;
      }
      continue;
    }
    for (const auto& dir : dirs) {
      std::string candidate = host::join_path(dir, name);
      if (out.found.empty() && host.fs().exists(candidate)) out.found = candidate;
    }
    std::string in_gib = host::join_path(k_gib_lib, name);
    if (out.found_off_path.empty() && host.fs().exists(in_gib)) out.found_off_path = in_gib;
  }
  return out;
}

void check_plugin_network(const std::string& net, const PluginSearch& plugin, bool is_gib,
                          Findings& f) {
  if (plugin.disabled) {
    f.add(Status::fail,
          fmt::format("NCCL_NET={} needs a net plugin but NCCL_NET_PLUGIN=none disables plugins",
                      net),
          "NCCL_NET_PLUGIN unset or naming the plugin", "unset NCCL_NET_PLUGIN");
    return;
  }
  if (!plugin.found.empty()) return;
  if (!plugin.unknown.empty()) {
    f.add(Status::unknown,
          fmt::format("NCCL_NET_PLUGIN names the relative path '{}', which depends on the "
                      "working directory",
                      plugin.unknown),
          "an absolute path or a library name", "set NCCL_NET_PLUGIN to an absolute path");
    return;
  }
  if (!plugin.found_off_path.empty()) {
    f.add(Status::fail,
          fmt::format("NCCL_NET={}: the plugin {} exists but {} is not on LD_LIBRARY_PATH, so "
                      "NCCL cannot load it ('Failed to initialize any NET plugin')",
                      net, plugin.found_off_path, k_gib_lib),
          fmt::format("{} on LD_LIBRARY_PATH", k_gib_lib),
          fmt::format("export LD_LIBRARY_PATH={}:$LD_LIBRARY_PATH (or {})", k_gib_lib,
                      k_gib_fix_env));
    return;
  }
  std::string tried = join_names(plugin.tried);
  if (is_gib) {
    f.add(Status::fail,
          fmt::format("NCCL_NET={} but the gIB net plugin is not reachable (looked for {} on "
                      "LD_LIBRARY_PATH, the system library folders and {}): NCCL fails with "
                      "'Failed to initialize any NET plugin'",
                      net, tried, k_gib_lib),
          "the gIB plugin on the loader path",
          fmt::format("mount the gIB install at {} (GKE: hostPath /home/kubernetes/bin/gib) and "
                      "{}, or unset NCCL_NET",
                      k_gib_root, k_gib_fix_env));
  } else {
    f.add(Status::fail,
          fmt::format("NCCL_NET={} names a plugin network but no net plugin library is reachable "
                      "(looked for {})",
                      net, tried),
          "the plugin providing this network on LD_LIBRARY_PATH",
          "install the plugin and add its folder to LD_LIBRARY_PATH, or unset NCCL_NET");
  }
}

Outcome check_net_plugin(const Context& ctx) {
  const auto& env = ctx.host.env();
  const auto& fs = ctx.host.fs();
  const std::string src = env_source(env);
  Findings f;
  auto net = env.get_nonempty("NCCL_NET");
  f.evidence("NCCL_NET", net.value_or("(unset)"), src);
  if (auto p = env.get("NCCL_NET_PLUGIN")) f.evidence("NCCL_NET_PLUGIN", *p, src);
  PluginSearch plugin = find_net_plugin(ctx.host);
  f.evidence("net plugin",
             plugin.disabled        ? "disabled"
             : plugin.found.empty() ? "not found"
                                    : plugin.found,
             "loader path: LD_LIBRARY_PATH and system library folders");
  bool gib_dir = fs.is_dir(k_gib_root);
  f.evidence(std::string(k_gib_root), gib_dir ? "present" : "absent", std::string(k_gib_root));

  bool want_gib = net && iequals(*net, "gIB");
  bool gib = want_gib || gib_dir || std::string_view(plugin.found).starts_with(k_gib_root);

  if (net) {
    if (iequals(*net, "IB")) {
      if (ctx.topo.nics.empty()) {
        f.add(Status::fail, "NCCL_NET=IB but the node shows no RDMA devices",
              "RDMA devices under /sys/class/infiniband",
              "expose the RDMA devices to the container (/dev/infiniband), or unset NCCL_NET");
      }
      auto disable = env.get_nonempty("NCCL_IB_DISABLE");
      if (disable && *disable != "0") {
        f.evidence("NCCL_IB_DISABLE", *disable, src);
        f.add(Status::fail, "NCCL_NET=IB while NCCL_IB_DISABLE disables the IB transport",
              "NCCL_IB_DISABLE unset or 0", "unset NCCL_IB_DISABLE");
      }
    } else if (!iequals(*net, "Socket")) {
      check_plugin_network(*net, plugin, want_gib, f);
    }
  }

  if (gib) {
    auto tuner_plugin = env.get_nonempty("NCCL_TUNER_PLUGIN");
    auto tuner_config = env.get_nonempty("NCCL_TUNER_CONFIG_PATH");
    f.evidence("NCCL_TUNER_CONFIG_PATH", tuner_config.value_or("(unset)"), src);
    if (tuner_plugin) f.evidence("NCCL_TUNER_PLUGIN", *tuner_plugin, src);
    std::string fix = fmt::format(
        "{} (it sets NCCL_TUNER_CONFIG_PATH), or export "
        "NCCL_TUNER_PLUGIN=none",
        k_gib_fix_env);
    if (tuner_plugin && iequals(*tuner_plugin, "none")) {
      // The tuner is off, so it needs no configuration.
    } else if (!tuner_config) {
      f.add(Status::fail,
            "gIB is installed but NCCL_TUNER_CONFIG_PATH is unset: its tuner stops NCCL with an "
            "internal error ('No NCCL_TUNER_CONFIG_PATH provided')",
            "NCCL_TUNER_CONFIG_PATH naming a readable tuner config", fix);
    } else if (auto read = fs.read(*tuner_config, 1 << 16); !read) {
      f.add(Status::fail,
            fmt::format("NCCL_TUNER_CONFIG_PATH cannot be read: {}", read.error().message),
            "NCCL_TUNER_CONFIG_PATH naming a readable tuner config", fix);
    }
    if (auto nonblocking = env.get("TORCH_NCCL_USE_COMM_NONBLOCKING")) {
      f.evidence("TORCH_NCCL_USE_COMM_NONBLOCKING", *nonblocking, src);
      f.add(Status::fail,
            fmt::format("TORCH_NCCL_USE_COMM_NONBLOCKING={} while gIB is in use (gIB expects it "
                        "unset)",
                        *nonblocking),
            "TORCH_NCCL_USE_COMM_NONBLOCKING unset", "unset TORCH_NCCL_USE_COMM_NONBLOCKING");
    }
  }

  if (!net && !gib) return f.finish("NCCL_NET unset and no gIB: NCCL picks its network itself");
  return f.finish(fmt::format("NCCL_NET={}{}", net.value_or("(unset)"), gib ? ", gIB set up" : ""));
}

void check_socket_ifname(const Context& ctx, const std::string& value, Findings& f) {
  std::vector<std::string> names;
  for (const auto& dev : ctx.topo.netdevs) names.push_back(dev.name);
  f.evidence("network interfaces", join_names(names), "/sys/class/net");
  topo::DeviceFilter filter = topo::parse_device_filter(value);
  for (const auto& note : filter.notes) {
    f.add(Status::warn, "NCCL_SOCKET_IFNAME: " + note, "entries NCCL reads as written",
          "rewrite NCCL_SOCKET_IFNAME, e.g. NCCL_SOCKET_IFNAME==eth0");
  }
  if (names.empty()) {
    f.add(Status::unknown, "no network interfaces were probed; cannot check NCCL_SOCKET_IFNAME");
    return;
  }
  if (!filter.exclude) {
    for (const auto& entry : filter.entries) {
      bool any = false;
      for (const auto& n : names) any = any || filter.entry_matches(entry, n);
      if (!any) {
        f.add(Status::fail,
              fmt::format("NCCL_SOCKET_IFNAME entry '{}' matches no interface (have: {})",
                          entry.name, join_names(names)),
              "every entry naming an interface of this node",
              fmt::format("set NCCL_SOCKET_IFNAME to this node's interfaces, e.g. "
                          "NCCL_SOCKET_IFNAME=={}",
                          names.front()));
      }
    }
  }
  std::vector<std::string> selected;
  for (const auto& n : names) {
    if (filter.selects(n)) selected.push_back(n);
  }
  f.evidence("interfaces NCCL_SOCKET_IFNAME selects", join_names(selected), "NCCL_SOCKET_IFNAME");
  if (selected.empty()) {
    f.add(Status::fail,
          fmt::format("NCCL_SOCKET_IFNAME={} selects no interface: NCCL fails with 'no socket "
                      "interface found'",
                      value),
          "at least one routable interface selected",
          "set NCCL_SOCKET_IFNAME to the node's data interface, e.g. NCCL_SOCKET_IFNAME==eth0");
    return;
  }
  AddressBook book = read_addresses(ctx.host.fs());
  auto family = ctx.host.env().get_nonempty("NCCL_SOCKET_FAMILY");
  bool v6_only = family && iequals(*family, "AF_INET6");
  // The fix names the routable interfaces: those selected, else any the node has.
  std::vector<std::string> good_selected;
  std::vector<std::string> good_all;
  for (const auto& n : names) {
    if (!poor_interface(n, book, v6_only).empty()) continue;
    good_all.push_back(n);
    if (filter.selects(n)) good_selected.push_back(n);
  }
  const auto& good = good_selected.empty() ? good_all : good_selected;
  std::string fix = good.empty()
                        ? "give the container the node's data interface (host network or a "
                          "secondary network) and name it in NCCL_SOCKET_IFNAME"
                        : "export NCCL_SOCKET_IFNAME=" +
                              env::shell_word(fmt::format("={}", fmt::join(good, ",")));
  for (const auto& n : selected) {
    std::string why = poor_interface(n, book, v6_only);
    if (why.empty()) continue;
    f.add(Status::warn,
          fmt::format("NCCL_SOCKET_IFNAME selects {}, {}: bootstrap and socket traffic may not "
                      "reach other nodes",
                      n, why),
          "only routable data interfaces selected", fix);
  }
}

void check_ib_hca(const Context& ctx, const std::string& value, Findings& f) {
  topo::DeviceFilter filter = topo::parse_device_filter(value);
  for (const auto& note : filter.notes) {
    f.add(Status::warn, "NCCL_IB_HCA: " + note, "entries NCCL reads as written",
          "rewrite NCCL_IB_HCA, e.g. NCCL_IB_HCA==mlx5_0,mlx5_1");
  }
  if (ctx.topo.nics.empty()) {
    f.add(Status::warn, "NCCL_IB_HCA is set but the node shows no RDMA devices",
          "RDMA devices under /sys/class/infiniband",
          "expose the RDMA devices (/dev/infiniband) or unset NCCL_IB_HCA");
    return;
  }
  std::vector<std::string> all;
  std::vector<std::string> selected;
  std::vector<std::string> selected_devices;
  std::vector<std::string> bonds;
  for (const auto& nic : ctx.topo.nics) {
    std::vector<int> ports;
    for (const auto& p : nic.ports) ports.push_back(p.port);
    if (ports.empty()) ports.push_back(-1);
    bool any_port = false;
    for (int port : ports) {
      std::string label = port < 0 ? nic.name : fmt::format("{}:{}", nic.name, port);
      all.push_back(label);
      if (!filter.selects(nic.name, port)) continue;
      selected.push_back(label);
      any_port = true;
    }
    if (!any_port) continue;
    bool bond = nic.is_bond || nic.name.find("bond") != std::string::npos;
    (bond ? bonds : selected_devices).push_back(nic.name);
  }
  f.evidence("RDMA ports", join_names(all), "/sys/class/infiniband");
  std::vector<std::string> rails;  // the non-bond devices, for fixes
  for (const auto& nic : ctx.topo.nics) {
    if (!nic.is_bond && nic.name.find("bond") == std::string::npos) rails.push_back(nic.name);
  }
  if (rails.empty()) rails.push_back(ctx.topo.nics.front().name);
  f.evidence("ports NCCL_IB_HCA selects", join_names(selected), "NCCL_IB_HCA");
  if (!filter.exclude) {
    for (const auto& entry : filter.entries) {
      bool any = false;
      for (const auto& nic : ctx.topo.nics) {
        if (nic.ports.empty()) any = any || filter.entry_matches(entry, nic.name);
        for (const auto& p : nic.ports) any = any || filter.entry_matches(entry, nic.name, p.port);
      }
      if (!any && !selected.empty()) {
        f.add(Status::warn,
              fmt::format("NCCL_IB_HCA entry '{}{}' matches no RDMA port (have: {})", entry.name,
                          entry.port < 0 ? "" : fmt::format(":{}", entry.port), join_names(all)),
              "every entry naming a device of this node", "drop the entry from NCCL_IB_HCA");
      }
    }
  }
  if (selected.empty()) {
    f.add(Status::fail,
          fmt::format("NCCL_IB_HCA={} matches none of the RDMA ports ({}): NCCL finds no IB device "
                      "and falls back to sockets",
                      value, join_names(all)),
          "NCCL_IB_HCA selecting this node's RDMA devices",
          "unset NCCL_IB_HCA, or list the devices: export NCCL_IB_HCA=" +
              env::shell_word(fmt::format("={}", fmt::join(rails, ","))));
    return;
  }
  for (const auto& bond : bonds) {
    f.add(Status::warn,
          fmt::format("NCCL_IB_HCA selects the bond device {} next to the rail NICs: it is "
                      "usually the management NIC and slows the rails down",
                      bond),
          "only the rail NICs selected",
          selected_devices.empty()
              ? "export NCCL_IB_HCA=" + env::shell_word("^=" + bond)
              : "export NCCL_IB_HCA=" +
                    env::shell_word(fmt::format("={}", fmt::join(selected_devices, ","))));
  }
}

Outcome check_ifname(const Context& ctx) {
  const auto& env = ctx.host.env();
  const std::string src = env_source(env);
  Findings f;
  auto ifname = env.get_nonempty("NCCL_SOCKET_IFNAME");
  auto hca = env.get_nonempty("NCCL_IB_HCA");
  f.evidence("NCCL_SOCKET_IFNAME", ifname.value_or("(unset)"), src);
  f.evidence("NCCL_IB_HCA", hca.value_or("(unset)"), src);
  if (ifname) check_socket_ifname(ctx, *ifname, f);
  if (hca) check_ib_hca(ctx, *hca, f);
  if (!ifname && !hca) {
    return f.finish("NCCL_SOCKET_IFNAME and NCCL_IB_HCA unset: NCCL's defaults apply");
  }
  return f.finish("the interface filters select usable devices");
}

constexpr Check k_checks[] = {
    {"nccl.net-plugin", "NCCL_NET has its net plugin, and gIB its settings", &check_net_plugin},
    {"nccl.ifname", "NCCL_SOCKET_IFNAME and NCCL_IB_HCA select usable devices", &check_ifname},
};

}  // namespace

std::span<const Check> nccl_checks() {
  return k_checks;
}

}  // namespace epkit::checks
