// rdma.devices: every RDMA device has its uverbs device (in the container too)
// and ACTIVE ports at the rate of its peers.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "checks/rdma_common.h"

namespace epkit::checks::rdma {

// ---- rdma.devices ----------------------------------------------------------

Outcome check_devices(const Context& ctx) {
  if (ctx.topo.nics.empty()) return skip("no RDMA device in /sys/class/infiniband");
  Verdict v;
  const auto& fs = ctx.host.fs();
  bool dev_seen = fs.is_dir("/dev");
  if (!dev_seen)
    v.note(Status::unknown, "the tree has no /dev: cannot tell whether the uverbs devices exist");
  // Per link layer, over ACTIVE ports. A bond's rate is the sum of its
  // members (2 x 200 = 400), so bonds neither set nor meet the bar.
  std::map<std::string, double> best_rate;
  for (const auto& nic : ctx.topo.nics) {
    if (nic.is_bond) continue;
    for (const auto& port : nic.ports) {
      if (port.state == "ACTIVE")
        best_rate[port.link_layer] = std::max(best_rate[port.link_layer], port.rate_gbps);
    }
  }
  // One finding per cause, naming every device it hits (a container given
  // none of the devices would otherwise repeat the sentence per device).
  std::vector<std::string> no_uverbs;
  std::vector<std::string> missing_names;
  std::vector<std::string> missing_devs;
  for (const auto& nic : ctx.topo.nics) {
    if (nic.uverbs.empty()) {
      v.add(nic.name + " uverbs", "none", "/sys/class/infiniband_verbs");
      no_uverbs.push_back(nic.name);
    } else if (dev_seen) {
      std::string dev = "/dev/infiniband/" + nic.uverbs;
      bool present = fs.lstat(dev).ok();
      v.add(dev, present ? "present" : "missing", dev);
      if (!present) {
        missing_names.push_back(nic.name);
        missing_devs.push_back(dev);
      }
    }
    if (nic.ports.empty()) {
      v.note(Status::warn, fmt::format("{}: no port could be read", nic.name));
      continue;
    }
    std::vector<std::string> down;
    for (const auto& port : nic.ports) {
      v.add(fmt::format("{} port {}", nic.name, port.port),
            fmt::format("{} {} {} {}", port.state, port.phys_state, port.rate, port.link_layer),
            port_path(nic, port, "state"));
      if (port.state != "ACTIVE") {
        down.push_back(fmt::format("port {} is {} ({})", port.port,
                                   port.state.empty() ? "?" : port.state,
                                   port.phys_state.empty() ? "?" : port.phys_state));
        continue;
      }
      double best = best_rate[port.link_layer];
      if (!nic.is_bond && port.rate_gbps > 0 && port.rate_gbps < best) {
        v.note(Status::warn,
               fmt::format("{} port {} runs at {} while other {} ports run at {} Gb/sec", nic.name,
                           port.port, port.rate, port.link_layer, best),
               fmt::format("{} Gb/sec on every port", best),
               "check cable, optics and switch port speed");
      }
    }
    if (down.empty()) continue;
    // A device with no ACTIVE port is lost to NCCL (it keeps only ACTIVE
    // ports); one dead port of a dual-port card is worth a look only.
    Status status = down.size() == nic.ports.size() ? Status::fail : Status::warn;
    v.note(status, fmt::format("{}: {}", nic.name, fmt::join(down, ", ")),
           "state ACTIVE, phys_state LinkUp",
           "check the cable and switch port (ibstat / ip link); for RoCE bring the netdev up");
  }
  if (!no_uverbs.empty()) {
    v.note(
        Status::fail,
        fmt::format("{} {} no uverbs device in /sys/class/infiniband_verbs (ib_uverbs not loaded)",
                    fmt::join(no_uverbs, ", "), no_uverbs.size() == 1 ? "has" : "have"),
        "a uverbs<N> per device", "modprobe ib_uverbs");
  }
  if (!missing_devs.empty()) {
    const bool one = missing_devs.size() == 1;
    v.note(Status::fail,
           fmt::format("{} {} in sysfs but {} {} missing: the container was not given {}",
                       fmt::join(missing_names, ", "), one ? "is" : "are",
                       fmt::join(missing_devs, ", "), one ? "is" : "are",
                       one ? "the device" : "the devices"),
           "/dev/infiniband/uverbs<N> for every device in /sys/class/infiniband",
           "docker: --device=/dev/infiniband; Kubernetes: request the RDMA device plugin's "
           "resource or mount /dev/infiniband (privileged)");
  }
  return v.finish(fmt::format("{} RDMA device(s), each with its uverbs device and ACTIVE ports",
                              ctx.topo.nics.size()));
}

}  // namespace epkit::checks::rdma
