// rdma.gid-index: the RoCE GID index NCCL will use names a RoCE v2 IPv4 GID.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "checks/rdma_common.h"

namespace epkit::checks::rdma {

namespace {

// ---- rdma.gid-index ----------------------------------------------------------

struct RoCEPort {
  const topo::RdmaNic* nic;
  const topo::IbPort* port;
};

bool is_v2_ipv4(const topo::IbPort& port, long index) {
  for (const auto& gid : port.gids) {
    if (gid.index == index) return gid.ipv4_mapped && gid.type.find("v2") != std::string::npos;
  }
  return false;
}

std::string describe_gid(const topo::IbPort& port, long index) {
  for (const auto& gid : port.gids) {
    if (gid.index == index) {
      return fmt::format("{} ({}, {})", gid.gid, gid.type.empty() ? "type ?" : gid.type,
                         gid.ipv4_mapped ? "IPv4-mapped" : "not IPv4-mapped");
    }
  }
  return "no such GID";
}

// The index to recommend: the RoCE v2 IPv4 index when all ports agree.
std::string right_index(const std::vector<RoCEPort>& ports) {
  std::set<int> indexes;
  for (const auto& p : ports) indexes.insert(p.port->roce_v2_ipv4_gid);
  if (indexes.size() == 1 && *indexes.begin() >= 0) return std::to_string(*indexes.begin());
  return {};
}

}  // namespace

Outcome check_gid_index(const Context& ctx) {
  std::vector<RoCEPort> ports;
  for (const auto& nic : ctx.topo.nics) {
    for (const auto& port : nic.ports) {
      if (port.link_layer == "Ethernet" && port.state == "ACTIVE") ports.push_back({&nic, &port});
    }
  }
  if (ports.empty()) {
    return skip(ctx.topo.nics.empty() ? "no RDMA device"
                                      : "no ACTIVE RoCE (Ethernet link layer) port");
  }
  Verdict v;
  for (const auto& p : ports) {
    v.add(fmt::format("{} port {} RoCE v2 IPv4 GID", p.nic->name, p.port->port),
          p.port->roce_v2_ipv4_gid >= 0 ? std::to_string(p.port->roce_v2_ipv4_gid) : "none",
          port_path(*p.nic, *p.port, "gid_attrs/types"));
    if (p.port->roce_v2_ipv4_gid < 0) {
      v.note(
          Status::warn,
          fmt::format("{} port {} has no RoCE v2 IPv4-mapped GID (no IPv4 address on its netdev?)",
                      p.nic->name, p.port->port),
          "an IPv4 address on the RoCE netdev", "assign the rail's IPv4 address to the netdev");
    }
  }
  std::string right = right_index(ports);
  std::string env_source = ctx.host.env().origin();

  for (const char* var : {"NCCL_IB_GID_INDEX", "NVSHMEM_IB_GID_INDEX"}) {
    auto value = ctx.host.env().get_nonempty(var);
    if (!value) continue;
    v.add(var, *value, env_source);
    auto index = parse_integer(*value);
    std::string fix =
        right.empty() ? fmt::format("set {} to the RoCE v2 IPv4-mapped GID index of each port", var)
                      : fmt::format("export {}={}", var, right);
    if (!index) {
      v.note(Status::fail, fmt::format("{}={} is not an integer", var, *value),
             "an integer GID index", fix);
      continue;
    }
    if (*index == -1 && std::string_view(var) == "NCCL_IB_GID_INDEX")
      continue;  // NCCL auto-selects
    // One finding per variable, naming every port it is wrong on (a node has
    // 8 rails; eight near-identical lines would bury the fix).
    std::vector<std::string> wrong;
    for (const auto& p : ports) {
      if (is_v2_ipv4(*p.port, *index)) continue;
      wrong.push_back(
          fmt::format("{} port {}: {}", p.nic->name, p.port->port, describe_gid(*p.port, *index)));
    }
    if (!wrong.empty()) {
      v.note(Status::fail,
             fmt::format("{}={} is not a RoCE v2 IPv4-mapped GID on {} of {} RoCE ports ({}); "
                         "the RoCE v2 IPv4-mapped GID is {}",
                         var, *index, wrong.size(), ports.size(), wrong.front(),
                         right.empty() ? "not the same index on every port" : "index " + right),
             "the index of a RoCE v2 IPv4-mapped GID on every RoCE port", fix);
    }
  }

  std::vector<std::string> notes;
  if (!ctx.host.env().get_nonempty("NCCL_IB_GID_INDEX")) {
    notes.push_back("NCCL_IB_GID_INDEX unset: NCCL picks the GID itself (-1)");
  }
  if (!ctx.host.env().get_nonempty("NVSHMEM_IB_GID_INDEX")) {
    auto ibgda = ctx.host.env().get_nonempty("NVSHMEM_IB_ENABLE_IBGDA");
    auto transport = ctx.host.env().get_nonempty("NVSHMEM_REMOTE_TRANSPORT");
    bool uses_ibgda = (ibgda && truthy(*ibgda)) || (transport && *transport == "ibgda");
    if (uses_ibgda) {
      std::vector<std::string> wrong;
      for (const auto& p : ports) {
        if (is_v2_ipv4(*p.port, 0)) continue;
        wrong.push_back(
            fmt::format("{} port {}: {}", p.nic->name, p.port->port, describe_gid(*p.port, 0)));
      }
      if (!wrong.empty()) {
        v.note(Status::warn,
               fmt::format("NVSHMEM IBGDA is on and NVSHMEM_IB_GID_INDEX is unset, so NVSHMEM "
                           "uses GID 0, which is not RoCE v2 IPv4-mapped on {} of {} RoCE ports "
                           "({})",
                           wrong.size(), ports.size(), wrong.front()),
               "NVSHMEM_IB_GID_INDEX naming the RoCE v2 IPv4-mapped GID",
               right.empty() ? "set NVSHMEM_IB_GID_INDEX to the RoCE v2 IPv4-mapped GID index"
                             : fmt::format("export NVSHMEM_IB_GID_INDEX={}", right));
      }
    } else {
      notes.push_back(
          "NVSHMEM_IB_GID_INDEX unset (NVSHMEM would use GID 0; IBGDA is not configured)");
    }
  }
  return v.finish(fmt::format("{} RoCE ports{}{}", ports.size(),
                              right.empty() ? "" : ", RoCE v2 IPv4 GID index " + right,
                              notes.empty() ? "" : fmt::format("; {}", fmt::join(notes, "; "))));
}

}  // namespace epkit::checks::rdma
