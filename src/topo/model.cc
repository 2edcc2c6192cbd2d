#include "topo/model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <iterator>
#include <tuple>

namespace epkit::topo {

const char* to_string(PathType type) {
  switch (type) {
    case PathType::self:
      return "X";
    case PathType::nvlink:
      return "NV";
    case PathType::pix:
      return "PIX";
    case PathType::pxb:
      return "PXB";
    case PathType::phb:
      return "PHB";
    case PathType::node:
      return "NODE";
    case PathType::sys:
      return "SYS";
  }
  return "SYS";
}

std::string Path::label() const {
  if (type == PathType::nvlink) return fmt::format("NV{}", nvlinks);
  return to_string(type);
}

Path pci_path(const PciDevice& a, const PciDevice& b) {
  if (a.bdf == b.bdf) return {PathType::self};
  if (a.root.empty() || a.root != b.root) {
    return {a.numa_node == b.numa_node ? PathType::node : PathType::sys};
  }
  std::size_t common = 0;
  while (common < a.bridges.size() && common < b.bridges.size() &&
         a.bridges[common] == b.bridges[common]) {
    ++common;
  }
  if (common == 0) return {PathType::phb};
  // Below the deepest shared bridge, each side may pass one more bridge (its
  // switch downstream port) and still be under one switch.
  std::size_t below = std::max(a.bridges.size(), b.bridges.size()) - common;
  return {below <= 1 ? PathType::pix : PathType::pxb};
}

namespace {

bool is_gpu_bdf(const Snapshot& snap, const std::string& bdf) {
  return std::any_of(snap.gpus.begin(), snap.gpus.end(),
                     [&](const Gpu& g) { return g.pci.bdf == bdf; });
}

int active_links_to(const Gpu& gpu, const std::string& bdf) {
  if (!gpu.nvlinks) return 0;
  return static_cast<int>(
      std::count_if(gpu.nvlinks->begin(), gpu.nvlinks->end(),
                    [&](const NvLink& l) { return l.active && l.remote_bdf == bdf; }));
}

int active_links_to_switches(const Snapshot& snap, const Gpu& gpu) {
  if (!gpu.nvlinks) return 0;
  return static_cast<int>(
      std::count_if(gpu.nvlinks->begin(), gpu.nvlinks->end(), [&](const NvLink& l) {
        // An empty remote (NVML could not say, as in VMs that hide the NVSwitches)
        // counts as the fabric too.
        return l.active && !is_gpu_bdf(snap, l.remote_bdf);
      }));
}

}  // namespace

int nvlink_count(const Snapshot& snap, const Gpu& a, const Gpu& b) {
  if (int direct = active_links_to(a, b.pci.bdf); direct > 0) return direct;
  return std::min(active_links_to_switches(snap, a), active_links_to_switches(snap, b));
}

Path gpu_path(const Snapshot& snap, const Gpu& a, const Gpu& b) {
  if (a.pci.bdf == b.pci.bdf) return {PathType::self};
  if (int n = nvlink_count(snap, a, b); n > 0) return {PathType::nvlink, n};
  return pci_path(a.pci, b.pci);
}

Matrix build_matrix(const Snapshot& snap) {
  Matrix m;
  std::vector<const PciDevice*> devs;
  for (const auto& gpu : snap.gpus) {
    m.names.push_back(fmt::format("GPU{}", gpu.index));
    devs.push_back(&gpu.pci);
  }
  m.gpu_count = snap.gpus.size();
  for (const auto& nic : snap.nics) {
    if (!nic.pci) continue;
    m.names.push_back(fmt::format("NIC{}", m.nic_names.size()));
    m.nic_names.push_back(nic.name);
    devs.push_back(&*nic.pci);
  }
  for (std::size_t i = 0; i < devs.size(); ++i) {
    std::vector<std::string> row;
    for (std::size_t j = 0; j < devs.size(); ++j) {
      bool gpus = i < m.gpu_count && j < m.gpu_count;
      row.push_back(gpus ? gpu_path(snap, snap.gpus[i], snap.gpus[j]).label()
                         : pci_path(*devs[i], *devs[j]).label());
    }
    m.cells.push_back(std::move(row));
    m.cpu_affinity.push_back(i < m.gpu_count ? devs[i]->local_cpulist : "");
    m.numa.push_back(devs[i]->numa_node);
  }
  return m;
}

std::string render_matrix(const Matrix& m) {
  std::string out = fmt::format("{:<8}", "");
  for (const auto& name : m.names) out += fmt::format("{:<7}", name);
  out += fmt::format("{:<20}{}\n", "CPU Affinity", "NUMA Affinity");
  for (std::size_t i = 0; i < m.names.size(); ++i) {
    out += fmt::format("{:<8}", m.names[i]);
    for (const auto& cell : m.cells[i]) out += fmt::format("{:<7}", cell);
    if (i < m.gpu_count) {
      out += fmt::format("{:<20}{}", m.cpu_affinity[i].empty() ? "N/A" : m.cpu_affinity[i],
                         m.numa[i] < 0 ? std::string("N/A") : std::to_string(m.numa[i]));
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += "\n";
  }
  out +=
      "\nLegend:\n"
      "  X    = the device itself\n"
      "  NV#  = # bonded NVLinks (directly or through NVSwitches)\n"
      "  PIX  = through at most one PCIe switch (or one bridge)\n"
      "  PXB  = through several PCIe bridges, not through the host bridge\n"
      "  PHB  = through the PCIe host bridge of one root complex\n"
      "  NODE = between root complexes of one NUMA node\n"
      "  SYS  = between NUMA nodes (the CPU socket interconnect)\n";
  if (!m.nic_names.empty()) {
    out += "\nNIC Legend:\n";
    for (std::size_t i = 0; i < m.nic_names.size(); ++i) {
      out += fmt::format("  NIC{}: {}\n", i, m.nic_names[i]);
    }
  }
  return out;
}

namespace {

struct Candidate {
  const RdmaNic* nic;
  int port = 1;
  bool active = false;
  int gid_index = -1;
};

Candidate candidate_of(const RdmaNic& nic) {
  Candidate c{&nic};
  for (const auto& port : nic.ports) {
    if (port.state_code == 4 || port.state == "ACTIVE") {
      c.port = port.port;
      c.active = true;
      c.gid_index = port.roce_v2_ipv4_gid;
      return c;
    }
  }
  if (!nic.ports.empty()) {
    c.port = nic.ports.front().port;
    c.gid_index = nic.ports.front().roce_v2_ipv4_gid;
  }
  return c;
}

// The NICs assignment may use: with a PCI address; ACTIVE ones when any is;
// bond devices only when nothing else remains.
std::vector<Candidate> usable_nics(const Snapshot& snap) {
  std::vector<Candidate> all;
  for (const auto& nic : snap.nics) {
    if (nic.pci) all.push_back(candidate_of(nic));
  }
  auto keep_if = [&](auto pred) {
    std::vector<Candidate> kept;
    std::copy_if(all.begin(), all.end(), std::back_inserter(kept), pred);
    if (!kept.empty()) all = std::move(kept);
  };
  keep_if([](const Candidate& c) { return !c.nic->is_bond; });
  keep_if([](const Candidate& c) { return c.active; });
  return all;
}

}  // namespace

std::vector<NicChoice> assign_nics(const Snapshot& snap) {
  std::vector<NicChoice> out;
  auto nics = usable_nics(snap);
  // dist[g][n], and each GPU's nearest distance.
  std::vector<std::vector<PathType>> dist(snap.gpus.size());
  std::vector<PathType> nearest(snap.gpus.size(), PathType::sys);
  for (std::size_t g = 0; g < snap.gpus.size(); ++g) {
    for (const auto& c : nics) {
      dist[g].push_back(pci_path(snap.gpus[g].pci, *c.nic->pci).type);
      nearest[g] = std::min(nearest[g], dist[g].back());
    }
  }
  // demand[n]: how many GPUs have NIC n among their nearest.
  std::vector<int> demand(nics.size(), 0);
  std::vector<int> load(nics.size(), 0);
  for (std::size_t g = 0; g < snap.gpus.size(); ++g) {
    for (std::size_t n = 0; n < nics.size(); ++n) demand[n] += dist[g][n] == nearest[g] ? 1 : 0;
  }
  for (std::size_t g = 0; g < snap.gpus.size(); ++g) {
    const Gpu& gpu = snap.gpus[g];
    NicChoice choice;
    choice.gpu = gpu.index;
    choice.gpu_bdf = gpu.pci.bdf;
    std::size_t best = nics.size();
    auto key = [&](std::size_t n) {
      bool same_numa = nics[n].nic->pci->numa_node == gpu.pci.numa_node;
      return std::make_tuple(dist[g][n], load[n], demand[n], same_numa ? 0 : 1, n);
    };
    for (std::size_t n = 0; n < nics.size(); ++n) {
      if (best == nics.size() || key(n) < key(best)) best = n;
    }
    if (best < nics.size()) {
      ++load[best];
      const auto& c = nics[best];
      choice.nic = c.nic->name;
      choice.port = c.port;
      choice.path = dist[g][best];
      choice.gid_index = c.gid_index;
      choice.port_active = c.active;
    }
    out.push_back(std::move(choice));
  }
  return out;
}

std::vector<std::string> usable_nic_names(const Snapshot& snap) {
  std::vector<std::string> out;
  for (const auto& c : usable_nics(snap)) out.push_back(c.nic->name);
  return out;
}

std::string deep_ep_mapping(const std::vector<NicChoice>& choices) {
  std::string out;
  for (const auto& c : choices) {
    if (c.nic.empty()) continue;
    if (!out.empty()) out += ',';
    out += fmt::format("{}:{}:{}", c.gpu, c.nic, c.port);
  }
  return out;
}

std::string nccl_ib_hca(const std::vector<NicChoice>& choices) {
  std::vector<std::string> seen;
  for (const auto& c : choices) {
    if (c.nic.empty()) continue;
    std::string item = fmt::format("{}:{}", c.nic, c.port);
    if (std::find(seen.begin(), seen.end(), item) == seen.end()) seen.push_back(item);
  }
  if (seen.empty()) return {};
  return fmt::format("={}", fmt::join(seen, ","));
}

std::string nvshmem_hca_list(const NicChoice& choice) {
  if (choice.nic.empty()) return {};
  return fmt::format("{}:{}", choice.nic, choice.port);
}

bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < a.size() && j < b.size()) {
    bool da = std::isdigit(static_cast<unsigned char>(a[i])) != 0;
    bool db = std::isdigit(static_cast<unsigned char>(b[j])) != 0;
    if (da && db) {
      std::size_t ie = i;
      std::size_t je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      std::string na = a.substr(i, ie - i);
      std::string nb = b.substr(j, je - j);
      na.erase(0, std::min(na.find_first_not_of('0'), na.size()));
      nb.erase(0, std::min(nb.find_first_not_of('0'), nb.size()));
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ie;
      j = je;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

}  // namespace epkit::topo
