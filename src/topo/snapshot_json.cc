#include "topo/snapshot_json.h"

#include <fmt/format.h>

namespace epkit::topo {
namespace {

using nlohmann::json;

// Reads j[key] into out when present; a type mismatch throws json's
// type_error, which from_json turns into an invalid error.
template <typename T>
void get(const json& j, const char* key, T& out) {
  if (auto it = j.find(key); it != j.end() && !it->is_null()) out = it->get<T>();
}

json pci_to_json(const PciDevice& d) {
  return {{"bdf", d.bdf},
          {"vendor", fmt::format("0x{:04x}", d.vendor)},
          {"device", fmt::format("0x{:04x}", d.device)},
          {"class", fmt::format("0x{:06x}", d.class_code)},
          {"numa_node", d.numa_node},
          {"sysfs_path", d.sysfs_path},
          {"root", d.root},
          {"bridges", d.bridges},
          {"link_speed", d.link_speed},
          {"link_width", d.link_width},
          {"max_link_speed", d.max_link_speed},
          {"max_link_width", d.max_link_width},
          {"local_cpulist", d.local_cpulist}};
}

unsigned long hex_field(const json& j, const char* key) {
  std::string text;
  get(j, key, text);
  if (text.empty()) return 0;
  std::size_t used = 0;
  unsigned long value = std::stoul(text, &used, 16);  // throws on garbage
  if (used != text.size()) throw std::invalid_argument(fmt::format("{}: '{}'", key, text));
  return value;
}

PciDevice pci_from_json(const json& j) {
  PciDevice d;
  get(j, "bdf", d.bdf);
  d.vendor = static_cast<std::uint16_t>(hex_field(j, "vendor"));
  d.device = static_cast<std::uint16_t>(hex_field(j, "device"));
  d.class_code = static_cast<std::uint32_t>(hex_field(j, "class"));
  get(j, "numa_node", d.numa_node);
  get(j, "sysfs_path", d.sysfs_path);
  get(j, "root", d.root);
  get(j, "bridges", d.bridges);
  get(j, "link_speed", d.link_speed);
  get(j, "link_width", d.link_width);
  get(j, "max_link_speed", d.max_link_speed);
  get(j, "max_link_width", d.max_link_width);
  get(j, "local_cpulist", d.local_cpulist);
  return d;
}

json port_to_json(const IbPort& p) {
  json gids = json::array();
  for (const auto& g : p.gids) {
    gids.push_back({{"index", g.index},
                    {"gid", g.gid},
                    {"type", g.type},
                    {"ndev", g.ndev},
                    {"ipv4_mapped", g.ipv4_mapped}});
  }
  return {{"port", p.port},
          {"state", p.state},
          {"state_code", p.state_code},
          {"phys_state", p.phys_state},
          {"rate", p.rate},
          {"rate_gbps", p.rate_gbps},
          {"link_layer", p.link_layer},
          {"gids", gids},
          {"roce_v2_ipv4_gid", p.roce_v2_ipv4_gid}};
}

IbPort port_from_json(const json& j) {
  IbPort p;
  get(j, "port", p.port);
  get(j, "state", p.state);
  get(j, "state_code", p.state_code);
  get(j, "phys_state", p.phys_state);
  get(j, "rate", p.rate);
  get(j, "rate_gbps", p.rate_gbps);
  get(j, "link_layer", p.link_layer);
  get(j, "roce_v2_ipv4_gid", p.roce_v2_ipv4_gid);
  if (auto it = j.find("gids"); it != j.end()) {
    for (const auto& g : *it) {
      Gid gid;
      get(g, "index", gid.index);
      get(g, "gid", gid.gid);
      get(g, "type", gid.type);
      get(g, "ndev", gid.ndev);
      get(g, "ipv4_mapped", gid.ipv4_mapped);
      p.gids.push_back(std::move(gid));
    }
  }
  return p;
}

template <typename T, typename Fn>
std::vector<T> array_of(const json& j, const char* key, Fn from) {
  std::vector<T> out;
  if (auto it = j.find(key); it != j.end() && !it->is_null()) {
    if (!it->is_array()) throw std::invalid_argument(fmt::format("{} is not an array", key));
    for (const auto& item : *it) out.push_back(from(item));
  }
  return out;
}

}  // namespace

json to_json(const Snapshot& s) {
  json gpus = json::array();
  for (const auto& g : s.gpus) {
    json item = {{"index", g.index}, {"pci", pci_to_json(g.pci)},    {"name", g.name},
                 {"uuid", g.uuid},   {"name_source", g.name_source}, {"nvlinks", nullptr}};
    if (g.nvlinks) {
      item["nvlinks"] = json::array();
      for (const auto& l : *g.nvlinks) {
        item["nvlinks"].push_back(
            {{"link", l.link}, {"active", l.active}, {"remote_bdf", l.remote_bdf}});
      }
    }
    item["p2p_read"] = g.p2p_read ? json(*g.p2p_read) : json(nullptr);
    item["p2p_write"] = g.p2p_write ? json(*g.p2p_write) : json(nullptr);
    gpus.push_back(std::move(item));
  }
  json nvswitches = json::array();
  for (const auto& n : s.nvswitches) nvswitches.push_back({{"pci", pci_to_json(n.pci)}});
  json nics = json::array();
  for (const auto& n : s.nics) {
    json ports = json::array();
    for (const auto& p : n.ports) ports.push_back(port_to_json(p));
    nics.push_back({{"name", n.name},
                    {"pci", n.pci ? pci_to_json(*n.pci) : json(nullptr)},
                    {"netdevs", n.netdevs},
                    {"ports", ports},
                    {"uverbs", n.uverbs},
                    {"hca_type", n.hca_type},
                    {"fw_ver", n.fw_ver},
                    {"node_guid", n.node_guid},
                    {"is_bond", n.is_bond}});
  }
  json netdevs = json::array();
  for (const auto& n : s.netdevs) {
    netdevs.push_back({{"name", n.name},
                       {"pci_bdf", n.pci_bdf ? json(*n.pci_bdf) : json(nullptr)},
                       {"operstate", n.operstate},
                       {"mac", n.mac},
                       {"mtu", n.mtu},
                       {"is_virtual", n.is_virtual}});
  }
  json switches = json::array();
  for (const auto& w : s.switches) {
    switches.push_back({{"upstream_bdf", w.upstream_bdf}, {"gpus", w.gpus}, {"nics", w.nics}});
  }
  return {{"sysroot", s.sysroot},     {"gpus", gpus},
          {"nvswitches", nvswitches}, {"nics", nics},
          {"netdevs", netdevs},       {"switches", switches},
          {"nvml", s.nvml},           {"driver_version", s.driver_version},
          {"notes", s.notes}};
}

Result<Snapshot> from_json(const json& j) {
  if (!j.is_object()) return make_error(ErrorCode::invalid, "topology snapshot: not a JSON object");
  try {
    Snapshot s;
    get(j, "sysroot", s.sysroot);
    s.gpus = array_of<Gpu>(j, "gpus", [](const json& g) {
      Gpu gpu;
      get(g, "index", gpu.index);
      if (auto it = g.find("pci"); it != g.end()) gpu.pci = pci_from_json(*it);
      get(g, "name", gpu.name);
      get(g, "uuid", gpu.uuid);
      get(g, "name_source", gpu.name_source);
      if (auto it = g.find("nvlinks"); it != g.end() && !it->is_null()) {
        gpu.nvlinks = array_of<NvLink>(g, "nvlinks", [](const json& l) {
          NvLink link;
          get(l, "link", link.link);
          get(l, "active", link.active);
          get(l, "remote_bdf", link.remote_bdf);
          return link;
        });
      }
      for (auto [key, field] :
           {std::pair{"p2p_read", &gpu.p2p_read}, std::pair{"p2p_write", &gpu.p2p_write}}) {
        if (auto it = g.find(key); it != g.end() && it->is_array()) {
          std::vector<int> values;
          for (const auto& v : *it) values.push_back(v.is_number_integer() ? v.get<int>() : -1);
          *field = std::move(values);
        }
      }
      return gpu;
    });
    s.nvswitches = array_of<NvSwitch>(
        j, "nvswitches", [](const json& n) { return NvSwitch{pci_from_json(n.at("pci"))}; });
    s.nics = array_of<RdmaNic>(j, "nics", [](const json& n) {
      RdmaNic nic;
      get(n, "name", nic.name);
      if (auto it = n.find("pci"); it != n.end() && !it->is_null()) nic.pci = pci_from_json(*it);
      get(n, "netdevs", nic.netdevs);
      nic.ports = array_of<IbPort>(n, "ports", port_from_json);
      get(n, "uverbs", nic.uverbs);
      get(n, "hca_type", nic.hca_type);
      get(n, "fw_ver", nic.fw_ver);
      get(n, "node_guid", nic.node_guid);
      get(n, "is_bond", nic.is_bond);
      return nic;
    });
    s.netdevs = array_of<NetDev>(j, "netdevs", [](const json& n) {
      NetDev dev;
      get(n, "name", dev.name);
      if (auto it = n.find("pci_bdf"); it != n.end() && !it->is_null()) {
        dev.pci_bdf = it->get<std::string>();
      }
      get(n, "operstate", dev.operstate);
      get(n, "mac", dev.mac);
      get(n, "mtu", dev.mtu);
      get(n, "is_virtual", dev.is_virtual);
      return dev;
    });
    s.switches = array_of<PciSwitch>(j, "switches", [](const json& w) {
      PciSwitch sw;
      get(w, "upstream_bdf", sw.upstream_bdf);
      get(w, "gpus", sw.gpus);
      get(w, "nics", sw.nics);
      return sw;
    });
    get(j, "nvml", s.nvml);
    get(j, "driver_version", s.driver_version);
    get(j, "notes", s.notes);
    return s;
  } catch (const std::exception& e) {
    return make_error(ErrorCode::invalid, fmt::format("topology snapshot: {}", e.what()));
  }
}

json to_json(const Matrix& m) {
  json rows = json::array();
  for (std::size_t i = 0; i < m.names.size(); ++i) {
    rows.push_back({{"name", m.names[i]},
                    {"cells", m.cells[i]},
                    {"cpu_affinity", m.cpu_affinity[i]},
                    {"numa", m.numa[i]}});
  }
  json legend = json::object();
  for (std::size_t i = 0; i < m.nic_names.size(); ++i)
    legend[fmt::format("NIC{}", i)] = m.nic_names[i];
  return {{"columns", m.names}, {"rows", rows}, {"nic_legend", legend}};
}

json to_json(const std::vector<NicChoice>& choices) {
  json per_gpu = json::array();
  for (const auto& c : choices) {
    per_gpu.push_back({{"gpu", c.gpu},
                       {"gpu_bdf", c.gpu_bdf},
                       {"nic", c.nic},
                       {"port", c.port},
                       {"path", to_string(c.path)},
                       {"port_active", c.port_active},
                       {"roce_v2_ipv4_gid", c.gid_index},
                       {"NVSHMEM_HCA_LIST", nvshmem_hca_list(c)}});
  }
  return {{"per_gpu", per_gpu},
          {"DEEP_EP_DEVICE_TO_HCA_MAPPING", deep_ep_mapping(choices)},
          {"NCCL_IB_HCA", nccl_ib_hca(choices)}};
}

}  // namespace epkit::topo
