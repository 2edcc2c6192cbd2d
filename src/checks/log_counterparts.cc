#include "checks/log_counterparts.h"

#include <fmt/format.h>

#include <array>
#include <cctype>

#include "checks/rdma_common.h"

namespace epkit::checks {
namespace {

using rdma::Verdict;

// Port counters that only grow when the link misbehaves (the IB PortCounters
// attributes the kernel exposes for IB and RoCE ports alike).
struct Counter {
  std::string_view name;
  std::string_view meaning;
};
constexpr std::array k_counters = {
    Counter{"link_downed", "the link went down"},
    Counter{"link_error_recovery", "the link retrained"},
    Counter{"symbol_error", "symbol errors (bad cable, optics or port)"},
    Counter{"local_link_integrity_errors", "link integrity errors"},
    Counter{"port_rcv_errors", "received packets with errors"},
    Counter{"excessive_buffer_overrun_errors", "buffer overruns"},
};

// rdma.port-errors: the counters behind "NET/IB : mlx5_3:1 Got async event :
// port error" (a flapping link) and completion errors with retries exceeded.
Outcome check_port_errors(const Context& ctx) {
  if (ctx.topo.nics.empty()) return skip("no RDMA device in /sys/class/infiniband");
  const auto& fs = ctx.host.fs();
  Verdict v;
  std::size_t read = 0;
  for (const auto& nic : ctx.topo.nics) {
    for (const auto& port : nic.ports) {
      std::vector<std::string> bad;
      for (const auto& c : k_counters) {
        std::string path = rdma::port_path(nic, port, fmt::format("counters/{}", c.name));
        auto text = fs.read_trimmed(path);
        if (!text) continue;
        auto value = rdma::parse_integer(*text);
        if (!value || *value < 0) {
          v.note(Status::unknown, fmt::format("{}: not a counter value", path));
          continue;
        }
        ++read;
        v.add(fmt::format("{} port {} {}", nic.name, port.port, c.name), std::to_string(*value),
              path);
        if (*value > 0) bad.push_back(fmt::format("{} {} ({})", c.name, *value, c.meaning));
      }
      if (bad.empty()) continue;
      v.note(Status::warn, fmt::format("{} port {}: {}", nic.name, port.port, fmt::join(bad, ", ")),
             "error counters at 0 (they count since the driver loaded)",
             "check the cable, optics and switch port (ibstat, mlxlink -d <dev> -m); counters "
             "that keep growing mean a flapping link: drain the node");
    }
  }
  // Virtual functions and some trees expose no counters: nothing to judge
  // (not a doubt about the node, so not UNKNOWN).
  if (read == 0 && v.worst() == Status::pass)
    return skip("no port error counters exposed (ports/*/counters missing)");
  return v.finish(fmt::format("{} port error counters read, all 0", read));
}

// Whether a process named `name` runs, from /proc/<pid>/comm (bounded).
bool process_running(const host::Sysroot& fs, std::string_view name) {
  auto pids = fs.list("/proc");
  if (!pids) return false;
  std::size_t seen = 0;
  for (const auto& pid : *pids) {
    if (pid.empty() || !std::isdigit(static_cast<unsigned char>(pid[0]))) continue;
    if (++seen > 65536) break;
    auto comm = fs.read_trimmed("/proc/" + pid + "/comm");
    if (comm && *comm == name) return true;
  }
  return false;
}

bool in_container(const host::Sysroot& fs) {
  return fs.exists("/.dockerenv") || fs.exists("/run/.containerenv") ||
         fs.exists("/var/run/secrets/kubernetes.io");
}

// gpu.fabric-manager: NVSwitch systems need nv-fabricmanager before NVLS
// multicast (NCCL's NVLS, NVSHMEM's NVLS teams) can bind memory.
Outcome check_fabric_manager(const Context& ctx) {
  if (ctx.topo.nvswitches.empty()) return skip("no NVSwitch on this node");
  const auto& fs = ctx.host.fs();
  Outcome out;
  if (process_running(fs, "nv-fabricmanager")) {
    out = pass(
        fmt::format("{} NVSwitch(es); nv-fabricmanager is running", ctx.topo.nvswitches.size()));
  } else if (in_container(fs)) {
    out = unknown(
        "NVSwitches are visible but this is a container: the host's nv-fabricmanager cannot be "
        "seen from here");
  } else {
    out = warn(fmt::format("{} NVSwitch(es) but no nv-fabricmanager process: NVLS multicast "
                           "(NCCL NVLS, NVSHMEM NVLS teams) fails to bind memory",
                           ctx.topo.nvswitches.size()),
               "nv-fabricmanager running, fabric state Completed (nvidia-smi -q)",
               "systemctl enable --now nvidia-fabricmanager; or NCCL_NVLS_ENABLE=0");
  }
  out.add("NVSwitches", std::to_string(ctx.topo.nvswitches.size()), "/sys/bus/pci/devices");
  return out;
}

constexpr Check k_checks[] = {
    {"rdma.port-errors", "RDMA port error counters at 0 (no flapping link)", &check_port_errors},
    {"gpu.fabric-manager", "Fabric Manager runs where NVSwitches need it (NVLS)",
     &check_fabric_manager},
};

}  // namespace

std::span<const Check> log_counterpart_checks() {
  return k_checks;
}

}  // namespace epkit::checks
