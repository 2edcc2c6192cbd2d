// epkit topo: the node's GPUs, NICs, PCIe tree and the GPU-to-NIC mapping.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>
#include <ostream>

#include "cli/command.h"
#include "cli/text_style.h"
#include "env/shell.h"
#include "topo/model.h"
#include "topo/probe.h"
#include "topo/snapshot_json.h"
#include "util/json.h"

namespace epkit::cli {
namespace {

std::string numa_text(int numa) {
  return numa < 0 ? "-" : std::to_string(numa);
}

std::string link_text(const topo::PciDevice& pci) {
  if (pci.link_speed.empty() && pci.link_width == 0) return "-";
  std::string out = fmt::format("{} x{}", pci.link_speed, pci.link_width);
  if (pci.max_link_speed != pci.link_speed || pci.max_link_width != pci.link_width) {
    out += fmt::format(" (max {} x{})", pci.max_link_speed, pci.max_link_width);
  }
  return out;
}

void section(Io& io, const std::string& title) {
  io.out << "\n" << styled(io.color, Style::bold, title) << "\n";
}

void print_devices(const topo::Snapshot& snap, Io& io) {
  section(io, fmt::format("GPUs ({})", snap.gpus.size()));
  for (const auto& g : snap.gpus) {
    io.out << fmt::format("  GPU{:<3} {}  {:<24} NUMA {:<2} {}\n", g.index, g.pci.bdf, g.name,
                          numa_text(g.pci.numa_node), link_text(g.pci));
    if (!g.uuid.empty())
      io.out << fmt::format("          {}  (name from {})\n", g.uuid, g.name_source);
    if (g.nvlinks) {
      int active = 0;
      for (const auto& l : *g.nvlinks) active += l.active ? 1 : 0;
      io.out << fmt::format("          NVLink: {} of {} links active\n", active, g.nvlinks->size());
    }
  }
  io.out << fmt::format("  driver {}; NVML: {}\n",
                        snap.driver_version.empty() ? "unknown" : snap.driver_version, snap.nvml);
  if (!snap.nvswitches.empty()) {
    section(io, fmt::format("NVSwitches ({})", snap.nvswitches.size()));
    for (const auto& n : snap.nvswitches) {
      io.out << fmt::format("  {}  device 0x{:04x}  NUMA {}\n", n.pci.bdf, n.pci.device,
                            numa_text(n.pci.numa_node));
    }
  }
  section(io, fmt::format("RDMA NICs ({})", snap.nics.size()));
  for (const auto& n : snap.nics) {
    io.out << fmt::format(
        "  {:<12} {}  NUMA {:<2} netdev {}  {}{}\n", n.name,
        n.pci ? n.pci->bdf : std::string("no PCI device"), numa_text(n.pci ? n.pci->numa_node : -1),
        n.netdevs.empty() ? std::string("-") : fmt::format("{}", fmt::join(n.netdevs, ",")),
        n.uverbs.empty() ? "no uverbs" : n.uverbs, n.is_bond ? "  (bond)" : "");
    for (const auto& p : n.ports) {
      io.out << fmt::format("    port {}: {} {}  {}  {}", p.port, p.state, p.phys_state, p.rate,
                            p.link_layer);
      if (p.link_layer == "Ethernet") {
        io.out << (p.roce_v2_ipv4_gid >= 0
                       ? fmt::format("  RoCE v2 IPv4 GID index {}", p.roce_v2_ipv4_gid)
                       : std::string("  no RoCE v2 IPv4 GID"));
      }
      io.out << "\n";
    }
  }
  std::vector<std::string> others;
  for (const auto& d : snap.netdevs) {
    bool on_nic = false;
    for (const auto& n : snap.nics) {
      for (const auto& nd : n.netdevs) on_nic = on_nic || nd == d.name;
    }
    if (on_nic) continue;
    others.push_back(fmt::format("  {:<14} {:<8} {:<18} mtu {:<6} {}", d.name, d.operstate, d.mac,
                                 d.mtu, d.is_virtual ? "virtual" : d.pci_bdf.value_or("-")));
  }
  section(io, fmt::format("Other network interfaces ({})", others.size()));
  for (const auto& line : others) io.out << line << "\n";
  section(io, fmt::format("PCIe switches ({})", snap.switches.size()));
  for (const auto& s : snap.switches) {
    std::vector<std::string> gpus;
    for (const auto& bdf : s.gpus) {
      for (const auto& g : snap.gpus) {
        if (g.pci.bdf == bdf) gpus.push_back(fmt::format("GPU{}", g.index));
      }
    }
    io.out << fmt::format(
        "  {}  GPUs: {:<12} NICs: {}\n", s.upstream_bdf,
        gpus.empty() ? std::string("-") : fmt::format("{}", fmt::join(gpus, ",")),
        s.nics.empty() ? std::string("-") : fmt::format("{}", fmt::join(s.nics, ",")));
  }
}

void print_mapping(const std::vector<topo::NicChoice>& choices, Io& io) {
  section(io, "GPU to NIC");
  bool any = false;
  for (const auto& c : choices) {
    if (c.nic.empty()) continue;
    any = true;
    io.out << fmt::format(
        "  GPU{:<3} -> {}:{}  ({}{}{})\n", c.gpu, c.nic, c.port, topo::to_string(c.path),
        c.port_active ? "" : ", port not ACTIVE",
        c.gid_index >= 0 ? fmt::format(", RoCE v2 GID index {}", c.gid_index) : "");
  }
  if (!any) {
    io.out << "  no RDMA NIC to assign\n";
    return;
  }
  io.out << "\n  export DEEP_EP_DEVICE_TO_HCA_MAPPING="
         << env::shell_word(topo::deep_ep_mapping(choices)) << "\n";
  io.out << "  export NCCL_IB_HCA=" << env::shell_word(topo::nccl_ib_hca(choices)) << "\n";
  io.out << "  NVSHMEM_HCA_LIST per GPU process:";
  for (const auto& c : choices) {
    if (!c.nic.empty()) io.out << fmt::format(" GPU{}={}", c.gpu, topo::nvshmem_hca_list(c));
  }
  io.out << "\n";
}

}  // namespace

Command make_topo_command() {
  return {"topo", "Show GPUs, NVSwitches, RDMA NICs, the PCIe tree and the GPU-to-NIC mapping",
          [](CLI::App& app) -> Runner {
            auto opts = std::make_shared<CommonOptions>();
            add_json_flag(app, *opts);
            add_sysroot_option(app, *opts);
            app.footer("Path types and the mapping rule: docs/topology.md.");
            return [opts](Io& io) -> int {
              auto host = make_host(*opts);
              if (!host) {
                io.err << "epkit topo: " << host.error().message << "\n";
                return k_exit_usage;
              }
              auto snap = topo::probe(*host);
              auto matrix = topo::build_matrix(snap);
              auto choices = topo::assign_nics(snap);
              if (opts->json) {
                nlohmann::json out = {{"snapshot", topo::to_json(snap)},
                                      {"matrix", topo::to_json(matrix)},
                                      {"assignment", topo::to_json(choices)}};
                io.out << util::dump_json(out, 2) << "\n";
                return k_exit_ok;
              }
              io.out << fmt::format("epkit topo: {} GPU{}, {} RDMA device{}", snap.gpus.size(),
                                    snap.gpus.size() == 1 ? "" : "s", snap.nics.size(),
                                    snap.nics.size() == 1 ? "" : "s");
              if (!host->live()) io.out << fmt::format(" (sysroot {})", host->fs().root());
              io.out << "\n";
              if (snap.gpus.empty()) {
                io.out << "No NVIDIA GPU on this node. To see a GPU node: "
                          "epkit topo --sysroot examples/gke-a4\n";
              }
              print_devices(snap, io);
              if (!snap.gpus.empty()) {
                section(io, "Topology matrix");
                io.out << topo::render_matrix(matrix);
                print_mapping(choices, io);
              }
              if (!snap.notes.empty()) {
                section(io, fmt::format("Probe notes ({})", snap.notes.size()));
                for (const auto& note : snap.notes) io.out << "  " << note << "\n";
              }
              return k_exit_ok;
            };
          }};
}

}  // namespace epkit::cli
