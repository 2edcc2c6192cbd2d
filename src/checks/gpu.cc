// gpu.* checks: the GPUs themselves and how they reach each other and the NICs.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "checks/check.h"
#include "env/shell.h"
#include "host/dl/cuda.h"
#include "host/dl/nvml.h"
#include "topo/hca_list.h"
#include "topo/model.h"

namespace epkit::checks {
namespace {

void add_gpu_list(Outcome& out, const topo::Snapshot& snap) {
  for (const auto& g : snap.gpus) {
    out.add(fmt::format("GPU{}", g.index), fmt::format("{} {}", g.pci.bdf, g.name),
            g.name_source == "nvml" ? "NVML" : g.name_source);
  }
}

// NVLink: WARN when some links are down while others are up (a link that
// trained down on an NVLink system); nothing when no GPU reports any link.
void add_nvlink_findings(Outcome& out, const topo::Snapshot& snap) {
  int active_total = 0;
  std::vector<std::string> degraded;
  for (const auto& g : snap.gpus) {
    if (!g.nvlinks || g.nvlinks->empty()) continue;
    int active = static_cast<int>(std::count_if(g.nvlinks->begin(), g.nvlinks->end(),
                                                [](const topo::NvLink& l) { return l.active; }));
    active_total += active;
    out.add(fmt::format("GPU{} NVLinks", g.index),
            fmt::format("{} of {} active", active, g.nvlinks->size()),
            "NVML nvmlDeviceGetNvLinkState");
    if (active < static_cast<int>(g.nvlinks->size())) {
      degraded.push_back(fmt::format("GPU{} ({} of {})", g.index, active, g.nvlinks->size()));
    }
  }
  if (active_total > 0 && !degraded.empty() && out.status != Status::fail) {
    out.status = worse(out.status, Status::warn);
    out.summary += fmt::format("; inactive NVLinks on {}", fmt::join(degraded, ", "));
    out.expected = "every NVLink of every GPU active";
    out.fix = "check `nvidia-smi nvlink -s` and Fabric Manager; reseat or replace the GPU board";
  }
}

// Peer access as the probe read it from NVML (nvidia-smi topo -p2p r/w);
// nullopt when NVML did not answer, and libcuda is asked instead.
std::optional<Outcome> p2p_from_snapshot(const topo::Snapshot& snap) {
  for (const auto& g : snap.gpus) {
    if (!g.p2p_read || !g.p2p_write || g.p2p_read->size() != snap.gpus.size() ||
        g.p2p_write->size() != snap.gpus.size()) {
      return std::nullopt;
    }
  }
  std::vector<std::string> denied;
  for (const auto& a : snap.gpus) {
    for (const auto& b : snap.gpus) {
      if (a.index == b.index) continue;
      auto peer = static_cast<std::size_t>(&b - snap.gpus.data());
      for (auto [what, status] :
           {std::pair{"read", (*a.p2p_read)[peer]}, std::pair{"write", (*a.p2p_write)[peer]}}) {
        if (status != host::dl::k_nvml_p2p_status_ok) {
          denied.push_back(
              fmt::format("GPU{}->GPU{} {} (status {})", a.index, b.index, what, status));
        }
      }
    }
  }
  std::size_t n = snap.gpus.size();
  Outcome out;
  if (!denied.empty()) {
    out = fail(fmt::format("peer access denied for {} of {} GPU pair directions", denied.size(),
                           2 * n * (n - 1)),
               "nvmlDeviceGetP2PStatus OK for read and write between every pair",
               "check ACS on PCIe bridges, IOMMU (iommu=pt), and that all GPUs are in this "
               "container (nvidia-smi topo -p2p r)");
    out.add("denied", fmt::format("{}", fmt::join(denied, " ")), "nvmlDeviceGetP2PStatus");
  } else {
    out = pass(fmt::format("{} GPUs, peer read and write between every pair", n));
    out.add("peer access", "read and write OK for every pair", "nvmlDeviceGetP2PStatus");
  }
  add_gpu_list(out, snap);
  add_nvlink_findings(out, snap);
  return out;
}

Outcome check_p2p(const Context& ctx) {
  const auto& snap = ctx.topo;
  if (snap.gpus.empty()) return skip("no NVIDIA GPU on this node");
  if (auto from_nvml = p2p_from_snapshot(snap)) return std::move(*from_nvml);
  auto cuda =
      ctx.host.libs().cuda
          ? ctx.host.libs().cuda()
          : Result<const host::dl::CudaApi*>(make_error(ErrorCode::unavailable, "no CUDA loader"));
  if (!cuda) {
    Outcome out;
    if (!ctx.host.live()) {
      out = pass(fmt::format("{} GPU{} visible; peer access not probed (sysroot)", snap.gpus.size(),
                             snap.gpus.size() == 1 ? "" : "s"));
    } else {
      out = unknown(fmt::format("{} GPU{} visible, but libcuda cannot be used to test peer access",
                                snap.gpus.size(), snap.gpus.size() == 1 ? "" : "s"));
      out.fix =
          "run where the NVIDIA driver's libcuda.so.1 is visible (container toolkit), "
          "or set EPKIT_CUDA_LIB";
    }
    add_gpu_list(out, snap);
    out.add("libcuda", cuda.error().message, "dlopen");
    add_nvlink_findings(out, snap);
    return out;
  }
  const auto& api = **cuda;
  if (auto rc = api.init(0); rc != host::dl::k_cuda_success) {
    Outcome out = fail(fmt::format("cuInit failed: {}", api.describe(rc)),
                       "cuInit(0) succeeds on a node whose GPUs are visible",
                       "check the driver (nvidia-smi), Fabric Manager on NVSwitch systems, and "
                       "CUDA_VISIBLE_DEVICES");
    add_gpu_list(out, snap);
    return out;
  }
  int count = 0;
  if (auto rc = api.device_get_count(&count); rc != host::dl::k_cuda_success) {
    return fail(fmt::format("cuDeviceGetCount failed: {}", api.describe(rc)));
  }
  std::vector<host::dl::CuDevice> devices;
  std::vector<std::string> labels;
  for (int i = 0; i < count; ++i) {
    host::dl::CuDevice dev = 0;
    char bus[32] = {};
    if (api.device_get(&dev, i) != host::dl::k_cuda_success) continue;
    std::string label = fmt::format("CUDA{}", i);
    if (api.device_get_pci_bus_id(bus, sizeof bus, dev) == host::dl::k_cuda_success) {
      std::string bdf = host::dl::normalize_bus_id(bus);
      for (const auto& g : snap.gpus) {
        if (g.pci.bdf == bdf) label = fmt::format("GPU{}", g.index);
      }
    }
    devices.push_back(dev);
    labels.push_back(label);
  }
  std::vector<std::string> denied;
  for (std::size_t a = 0; a < devices.size(); ++a) {
    for (std::size_t b = 0; b < devices.size(); ++b) {
      if (a == b) continue;
      int can = 0;
      auto rc = api.device_can_access_peer(&can, devices[a], devices[b]);
      if (rc != host::dl::k_cuda_success || can == 0) {
        denied.push_back(fmt::format("{}->{}", labels[a], labels[b]));
      }
    }
  }
  Outcome out;
  if (!denied.empty()) {
    out = fail(
        fmt::format("peer access denied for {} of {} GPU pairs", denied.size(),
                    devices.size() * (devices.size() - 1)),
        "cuDeviceCanAccessPeer = 1 for every pair",
        "check ACS on PCIe bridges, IOMMU (iommu=pt), and that all GPUs are in this container");
    out.add("denied", fmt::format("{}", fmt::join(denied, " ")), "cuDeviceCanAccessPeer");
  } else {
    out = pass(fmt::format("{} GPUs, peer access between every pair", devices.size()));
  }
  if (count != static_cast<int>(snap.gpus.size())) {
    out.add("CUDA devices", std::to_string(count),
            "cuDeviceGetCount (differs from the PCI count: CUDA_VISIBLE_DEVICES or a fault)");
  }
  add_gpu_list(out, snap);
  add_nvlink_findings(out, snap);
  return out;
}

// GPU -> "hca:port" as some configuration resolves it.
struct Resolved {
  std::map<int, std::string> per_gpu;
  std::string how;  // where the mapping came from
  std::string source;
};

// The NICs the computed assignment uses: the ones a GPU should be on. (A
// storage NIC far from every GPU is not "idle" when nobody maps to it.)
std::vector<std::string> assigned_nics(const std::vector<topo::NicChoice>& best) {
  std::vector<std::string> out;
  for (const auto& c : best) {
    if (!c.nic.empty() && std::find(out.begin(), out.end(), c.nic) == out.end())
      out.push_back(c.nic);
  }
  return out;
}

// NICs used by more than one GPU while a NIC of the computed assignment is idle.
Outcome judge_mapping(const topo::Snapshot& snap, const Resolved& r, const std::string& fix_line) {
  auto best = topo::assign_nics(snap);
  std::map<std::string, std::vector<int>> users;  // hca name -> GPUs
  for (const auto& [gpu, hca_port] : r.per_gpu) {
    users[hca_port.substr(0, hca_port.rfind(':'))].push_back(gpu);
  }
  std::vector<std::string> idle;
  for (const auto& name : assigned_nics(best)) {
    if (!users.count(name)) idle.push_back(name);
  }
  std::vector<std::string> shared;
  for (const auto& [hca, gpus] : users) {
    if (gpus.size() > 1) shared.push_back(fmt::format("{} (GPU {})", hca, fmt::join(gpus, ",")));
  }
  std::vector<std::string> mapping;
  for (const auto& [gpu, hca] : r.per_gpu) mapping.push_back(fmt::format("{}:{}", gpu, hca));
  Outcome out;
  if (!shared.empty() && !idle.empty()) {
    out = fail(fmt::format("{} puts several GPUs on one NIC while {} idle: {}", r.how,
                           idle.size() == 1 ? "a NIC is" : fmt::format("{} NICs are", idle.size()),
                           fmt::join(shared, "; ")),
               "one NIC per GPU, nearest first (docs/topology.md)", fix_line);
  } else {
    // A GPU on a farther NIC than the computed choice works, slower.
    std::vector<std::string> far;
    for (const auto& choice : best) {
      auto it = r.per_gpu.find(choice.gpu);
      if (it == r.per_gpu.end() || choice.nic.empty()) continue;
      std::string hca = it->second.substr(0, it->second.rfind(':'));
      for (const auto& nic : snap.nics) {
        if (nic.name != hca || !nic.pci) continue;
        auto path = topo::pci_path(snap.gpus[static_cast<std::size_t>(choice.gpu)].pci, *nic.pci);
        if (path.type > choice.path) {
          far.push_back(fmt::format("GPU{} on {} ({}; {} is {})", choice.gpu, hca, path.label(),
                                    choice.nic, topo::to_string(choice.path)));
        }
      }
    }
    if (!far.empty()) {
      out = warn(
          fmt::format("{} puts GPUs on farther NICs than needed: {}", r.how, fmt::join(far, "; ")),
          "each GPU on its nearest NIC", fix_line);
    } else {
      out = pass(fmt::format("{}: one NIC per GPU where NICs allow", r.how));
    }
  }
  out.add("mapping", fmt::format("{}", fmt::join(mapping, ",")), r.source);
  std::vector<std::string> used;
  for (const auto& [hca, gpus] : users) used.push_back(hca);
  out.add("NICs used", used.empty() ? "-" : fmt::format("{}", fmt::join(used, ",")), "resolved");
  out.add("NICs idle", idle.empty() ? "-" : fmt::format("{}", fmt::join(idle, ",")), "resolved");
  return out;
}

Outcome check_nic_affinity(const Context& ctx) {
  const auto& snap = ctx.topo;
  if (snap.gpus.empty()) return skip("no NVIDIA GPU on this node");
  if (topo::usable_nic_names(snap).empty()) return skip("no RDMA NIC on this node");
  const auto& env = ctx.host.env();
  auto best = topo::assign_nics(snap);
  std::string computed = topo::deep_ep_mapping(best);
  std::string fix_line = "export DEEP_EP_DEVICE_TO_HCA_MAPPING=" + env::shell_word(computed);
  const std::string src = "env (" + env.origin() + ")";

  if (auto value = env.get_nonempty("DEEP_EP_DEVICE_TO_HCA_MAPPING")) {
    auto parsed = topo::parse_device_to_hca_mapping(*value);
    if (!parsed) {
      return fail(fmt::format("DEEP_EP_DEVICE_TO_HCA_MAPPING is malformed: {}",
                              parsed.error().message),
                  "gpu:hca:port entries separated by commas", fix_line)
          .add("DEEP_EP_DEVICE_TO_HCA_MAPPING", *value, src);
    }
    Resolved r{{}, "DEEP_EP_DEVICE_TO_HCA_MAPPING", src};
    for (const auto& m : *parsed) {
      bool on_node = std::any_of(snap.nics.begin(), snap.nics.end(),
                                 [&](const topo::RdmaNic& n) { return n.name == m.hca; });
      if (!on_node) {
        return fail(fmt::format(
                        "DEEP_EP_DEVICE_TO_HCA_MAPPING names {}, which this node does not have",
                        m.hca),
                    "HCAs from /sys/class/infiniband", fix_line)
            .add("DEEP_EP_DEVICE_TO_HCA_MAPPING", *value, src);
      }
      r.per_gpu[m.gpu] = fmt::format("{}:{}", m.hca, m.port);
    }
    Outcome out = judge_mapping(snap, r, fix_line);
    std::vector<std::string> missing;
    for (const auto& g : snap.gpus) {
      if (!r.per_gpu.count(g.index)) missing.push_back(fmt::format("GPU{}", g.index));
    }
    if (!missing.empty() && out.status != Status::fail) {
      // The process on an unlisted GPU gets no HCA from the mapping.
      out.status = worse(out.status, Status::warn);
      out.summary += fmt::format("; {} not in the mapping", fmt::join(missing, ","));
      out.expected = "an entry for every GPU";
      out.fix = fix_line;
    }
    return out;
  }

  auto hca_list = env.get_nonempty("NVSHMEM_HCA_LIST");
  bool pe_mapping = env.get_nonempty("NVSHMEM_ENABLE_NIC_PE_MAPPING").value_or("0") == "1";
  if (pe_mapping) {
    std::vector<std::string> hcas;
    if (hca_list) {
      auto filter = topo::parse_device_filter(*hca_list, topo::ListGrammar::nvshmem);
      hcas = topo::resolve_hca_filter(filter, snap);
      if (hcas.empty()) {
        Outcome none = fail("NVSHMEM_HCA_LIST matches no HCA on this node",
                            "names from /sys/class/infiniband", fix_line);
        none.add("NVSHMEM_HCA_LIST", *hca_list, src);
        for (const auto& note : filter.notes) none.add("NVSHMEM_HCA_LIST", note, "grammar");
        return none;
      }
    } else {
      hcas =
          topo::resolve_hca_filter(topo::parse_device_filter("", topo::ListGrammar::nvshmem), snap);
    }
    Resolved r{{}, "NVSHMEM_ENABLE_NIC_PE_MAPPING=1 (local rank i -> HCA i mod n)", src};
    for (const auto& g : snap.gpus) {
      r.per_gpu[g.index] = hcas[static_cast<std::size_t>(g.index) % hcas.size()];
    }
    Outcome out = judge_mapping(snap, r, fix_line);
    if (hca_list) out.add("NVSHMEM_HCA_LIST", *hca_list, src);
    return out;
  }
  if (hca_list) {
    return pass("NVSHMEM picks each GPU's nearest NIC among NVSHMEM_HCA_LIST (no NIC_PE_MAPPING)")
        .add("NVSHMEM_HCA_LIST", *hca_list, src)
        .add("computed", computed, "topology");
  }
  std::size_t gpus = snap.gpus.size();
  std::size_t nics = assigned_nics(best).size();
  if (gpus > 1 && nics > 1) {
    Outcome out = warn(
        fmt::format("no GPU-to-NIC mapping set: DeepEP would put all {} GPUs on {} and leave {} "
                    "NICs idle (measured: 6.5 GB/s RDMA instead of 54 with one NIC per GPU)",
                    gpus, snap.nics.front().name, nics - 1),
        "DEEP_EP_DEVICE_TO_HCA_MAPPING (or NVSHMEM_HCA_LIST per process) set from the topology",
        fix_line);
    out.add("DEEP_EP_DEVICE_TO_HCA_MAPPING", "unset", src);
    out.add("NVSHMEM_HCA_LIST", "unset", src);
    out.add("computed", computed, "topology (epkit topo)");
    return out;
  }
  return pass(fmt::format("{} GPU{} and {} usable NIC{}: nothing to spread", gpus,
                          gpus == 1 ? "" : "s", nics, nics == 1 ? "" : "s"))
      .add("computed", computed, "topology");
}

constexpr Check k_gpu_checks[] = {
    {"gpu.p2p", "GPUs visible; peer access and NVLink", &check_p2p},
    {"gpu.nic-affinity", "Each GPU on its own nearest RDMA NIC", &check_nic_affinity},
};

}  // namespace

std::span<const Check> gpu_checks() {
  return k_gpu_checks;
}

}  // namespace epkit::checks
