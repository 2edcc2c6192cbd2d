#include "topo/probe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "host/dl/nvml.h"
#include "support/paths.h"
#include "support/temp_tree.h"
#include "topo/example_host.h"
#include "topo/model.h"

namespace epkit::topo {
namespace {

Snapshot probe_tree(const std::string& name) {
  return probe(test::example_host(name));
}

const RdmaNic* find_nic(const Snapshot& snap, const std::string& name) {
  for (const auto& n : snap.nics) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

TEST(TopoProbe, GkeA4GpusInBusOrderWithDriverNames) {
  auto snap = probe_tree("gke-a4");
  ASSERT_EQ(snap.gpus.size(), 8u);
  EXPECT_TRUE(snap.notes.empty()) << snap.notes.front();
  for (std::size_t i = 0; i < snap.gpus.size(); ++i) {
    const auto& g = snap.gpus[i];
    EXPECT_EQ(g.index, static_cast<int>(i));
    if (i > 0) {
      EXPECT_LT(snap.gpus[i - 1].pci.bdf, g.pci.bdf);
    }
    EXPECT_EQ(g.name, "NVIDIA B200");
    EXPECT_EQ(g.pci.device, 0x2901);
    EXPECT_EQ(g.name_source, "/proc/driver/nvidia/gpus/" + g.pci.bdf + "/information");
    EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0u);
    EXPECT_FALSE(g.nvlinks.has_value());  // no NVML on a sysroot
  }
  const auto& g0 = snap.gpus[0].pci;
  EXPECT_EQ(g0.bdf, "0000:13:00.0");
  EXPECT_EQ(g0.root, "pci0000:10");
  EXPECT_EQ(g0.bridges, (std::vector<std::string>{"0000:10:01.0", "0000:11:00.0", "0000:12:00.0"}));
  EXPECT_EQ(g0.class_code, 0x030200u);
  EXPECT_EQ(g0.numa_node, 0);
  EXPECT_EQ(g0.link_speed, "32.0 GT/s PCIe");
  EXPECT_EQ(g0.link_width, 16);
  EXPECT_EQ(snap.gpus[4].pci.numa_node, 1);
  EXPECT_EQ(snap.driver_version, "580.126.09");
  EXPECT_NE(snap.nvml.find("not probed"), std::string::npos);
}

TEST(TopoProbe, GkeA4RoceNics) {
  auto snap = probe_tree("gke-a4");
  ASSERT_EQ(snap.nics.size(), 8u);
  const RdmaNic* nic = find_nic(snap, "mlx5_0");
  ASSERT_NE(nic, nullptr);
  ASSERT_TRUE(nic->pci.has_value());
  EXPECT_EQ(nic->pci->bdf, "0000:15:00.0");
  EXPECT_EQ(nic->pci->vendor, 0x15b3);
  EXPECT_EQ(nic->netdevs, std::vector<std::string>{"eth2"});
  EXPECT_EQ(nic->uverbs, "uverbs0");
  EXPECT_EQ(nic->hca_type, "MT4129");
  EXPECT_FALSE(nic->is_bond);
  ASSERT_EQ(nic->ports.size(), 1u);
  const auto& port = nic->ports[0];
  EXPECT_EQ(port.state, "ACTIVE");
  EXPECT_EQ(port.state_code, 4);
  EXPECT_EQ(port.phys_state, "LinkUp");
  EXPECT_EQ(port.rate_gbps, 400);
  EXPECT_EQ(port.link_layer, "Ethernet");
  ASSERT_EQ(port.gids.size(), 4u);  // zero entries skipped
  EXPECT_EQ(port.gids[3].type, "RoCE v2");
  EXPECT_TRUE(port.gids[3].ipv4_mapped);
  EXPECT_FALSE(port.gids[1].ipv4_mapped);
  EXPECT_EQ(port.gids[3].ndev, "eth2");
  EXPECT_EQ(port.roce_v2_ipv4_gid, 3);
}

TEST(TopoProbe, GkeA4NetdevsAndSwitches) {
  auto snap = probe_tree("gke-a4");
  auto lo = std::find_if(snap.netdevs.begin(), snap.netdevs.end(),
                         [](const NetDev& d) { return d.name == "lo"; });
  ASSERT_NE(lo, snap.netdevs.end());
  EXPECT_TRUE(lo->is_virtual);
  EXPECT_FALSE(lo->pci_bdf.has_value());
  auto eth0 = std::find_if(snap.netdevs.begin(), snap.netdevs.end(),
                           [](const NetDev& d) { return d.name == "eth0"; });
  ASSERT_NE(eth0, snap.netdevs.end());
  EXPECT_FALSE(eth0->is_virtual);
  EXPECT_EQ(eth0->pci_bdf.value_or(""), "0000:00:04.0");
  EXPECT_EQ(eth0->mtu, 8244);
  EXPECT_EQ(eth0->operstate, "up");
  ASSERT_EQ(snap.switches.size(), 4u);
  EXPECT_EQ(snap.switches[0].upstream_bdf, "0000:11:00.0");
  EXPECT_EQ(snap.switches[0].gpus, (std::vector<std::string>{"0000:13:00.0", "0000:14:00.0"}));
  EXPECT_EQ(snap.switches[0].nics, (std::vector<std::string>{"mlx5_0", "mlx5_1"}));
}

TEST(TopoProbe, DgxH100NvswitchesInfinibandAndBond) {
  auto snap = probe_tree("dgx-h100");
  EXPECT_TRUE(snap.notes.empty()) << snap.notes.front();
  ASSERT_EQ(snap.gpus.size(), 8u);
  EXPECT_EQ(snap.gpus[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(snap.nvswitches.size(), 4u);
  EXPECT_EQ(snap.nvswitches[0].pci.device, 0x22a3);
  ASSERT_EQ(snap.nics.size(), 11u);
  EXPECT_EQ(snap.nics.back().name, "mlx5_bond_0");  // natural order: mlx5_9 < mlx5_bond_0
  EXPECT_TRUE(snap.nics.back().is_bond);
  const RdmaNic* ib = find_nic(snap, "mlx5_3");
  ASSERT_NE(ib, nullptr);
  EXPECT_EQ(ib->ports[0].link_layer, "InfiniBand");
  EXPECT_EQ(ib->ports[0].rate, "400 Gb/sec (4X NDR)");
  ASSERT_EQ(ib->ports[0].gids.size(), 1u);
  EXPECT_EQ(ib->ports[0].gids[0].type, "IB/RoCE v1");
  EXPECT_EQ(ib->ports[0].roce_v2_ipv4_gid, -1);
}

TEST(TopoProbe, NameFallsBackToPciIdTableThenGenericName) {
  test::TempTree tree("examples/gke-a4");
  tree.remove("/proc/driver/nvidia");
  tree.write("/sys/bus/pci/devices/0000:14:00.0/device", "0x1db4\n");
  auto snap = probe(tree.host());
  ASSERT_EQ(snap.gpus.size(), 8u);
  EXPECT_EQ(snap.gpus[0].name, "NVIDIA B200");
  EXPECT_EQ(snap.gpus[0].name_source, "pci id");
  EXPECT_EQ(snap.gpus[1].name, "NVIDIA GPU 0x1db4");
  EXPECT_TRUE(snap.driver_version.empty());
}

TEST(TopoProbe, NodeWithoutGpuOrRdma) {
  test::TempTree tree;
  tree.write("/sys/devices/pci0000:00/0000:00:03.0/vendor", "0x1af4\n");
  tree.write("/sys/devices/pci0000:00/0000:00:03.0/class", "0x020000\n");
  tree.link("/sys/bus/pci/devices/0000:00:03.0", "../../../devices/pci0000:00/0000:00:03.0");
  tree.write("/sys/devices/virtual/net/lo/operstate", "unknown\n");
  tree.write("/sys/devices/virtual/net/lo/address", "00:00:00:00:00:00\n");
  tree.write("/sys/devices/virtual/net/lo/mtu", "65536\n");
  tree.link("/sys/class/net/lo", "../../devices/virtual/net/lo");
  auto snap = probe(tree.host());
  EXPECT_TRUE(snap.gpus.empty());
  EXPECT_TRUE(snap.nics.empty());
  EXPECT_TRUE(snap.switches.empty());
  ASSERT_EQ(snap.netdevs.size(), 1u);
  EXPECT_TRUE(snap.notes.empty()) << snap.notes.front();
}

TEST(TopoProbe, MissingFilesBecomeNotes) {
  test::TempTree tree("examples/gke-a4");
  const std::string gpu1 =
      "/sys/devices/pci0000:10/0000:10:01.0/0000:11:00.0/0000:12:01.0/0000:14:00.0";
  tree.remove(gpu1 + "/numa_node");
  tree.remove(gpu1 + "/current_link_speed");
  tree.write(gpu1 + "/current_link_width", "sixteen\n");
  const std::string nic =
      "/sys/devices/pci0000:10/0000:10:01.0/0000:11:00.0/0000:12:02.0/0000:15:00.0";
  tree.remove(nic + "/infiniband/mlx5_0/ports/1/gids");
  tree.remove(nic + "/infiniband/mlx5_0/ports/1/state");
  tree.remove(nic + "/infiniband/mlx5_0/fw_ver");
  tree.remove(
      "/sys/devices/pci0000:30/0000:30:01.0/0000:31:00.0/0000:32:03.0/0000:36:00.0");  // dangles
  tree.remove("/sys/class/net/eth0/mtu");
  auto snap = probe(tree.host());
  EXPECT_EQ(snap.gpus.size(), 8u);
  EXPECT_EQ(snap.gpus[1].pci.numa_node, -1);
  EXPECT_EQ(snap.gpus[1].pci.link_width, 0);
  auto has_note = [&](const std::string& part) {
    return std::any_of(snap.notes.begin(), snap.notes.end(),
                       [&](const std::string& n) { return n.find(part) != std::string::npos; });
  };
  EXPECT_TRUE(has_note(gpu1 + "/numa_node"));
  EXPECT_TRUE(has_note(gpu1 + "/current_link_speed"));
  EXPECT_TRUE(has_note("cannot parse 'sixteen'"));
  EXPECT_TRUE(has_note("ports/1/gids"));
  EXPECT_TRUE(has_note("ports/1/state"));
  EXPECT_TRUE(has_note("fw_ver"));
  EXPECT_TRUE(has_note("mlx5_3/device"));
  EXPECT_TRUE(has_note("/sys/class/net/eth0/mtu"));
  const RdmaNic* mlx0 = find_nic(snap, "mlx5_0");
  ASSERT_NE(mlx0, nullptr);
  EXPECT_EQ(mlx0->ports[0].state_code, 0);
  EXPECT_TRUE(mlx0->ports[0].gids.empty());
  const RdmaNic* mlx3 = find_nic(snap, "mlx5_3");
  ASSERT_NE(mlx3, nullptr);
  EXPECT_FALSE(mlx3->pci.has_value());
}

TEST(TopoProbe, EmptyTreeGivesNotesNotCrashes) {
  test::TempTree tree;
  auto snap = probe(tree.host());
  EXPECT_TRUE(snap.gpus.empty());
  EXPECT_FALSE(snap.notes.empty());  // /sys/bus/pci/devices and /sys/class/net missing
}

// What a VM that hides the NVSwitches answers for a link's remote end.
bool g_hidden_remote = false;

// A fake NVML (captureless lambdas): GPU names, UUIDs and NVLinks to an
// NVSwitch, link 17 down on GPU 3.
const host::dl::NvmlApi& fake_nvml() {
  static const host::dl::NvmlApi api = [] {
    using namespace host::dl;
    NvmlApi a;
    a.init = []() -> NvmlReturn { return k_nvml_success; };
    a.shutdown = []() -> NvmlReturn { return k_nvml_success; };
    a.error_string = [](NvmlReturn) -> const char* { return "fake"; };
    a.device_get_count = [](unsigned* n) -> NvmlReturn {
      *n = 8;
      return k_nvml_success;
    };
    a.device_get_handle_by_pci_bus_id = [](const char* bus, NvmlDevice* dev) -> NvmlReturn {
      // Encode the bus number in the handle.
      *dev = reinterpret_cast<NvmlDevice>(
          static_cast<std::uintptr_t>(std::strtoul(bus + 5, nullptr, 16)) + 1);
      return k_nvml_success;
    };
    a.device_get_name = [](NvmlDevice, char* out, unsigned n) -> NvmlReturn {
      std::snprintf(out, n, "NVIDIA H100 80GB HBM3 (nvml)");
      return k_nvml_success;
    };
    a.device_get_uuid = [](NvmlDevice dev, char* out, unsigned n) -> NvmlReturn {
      std::snprintf(out, n, "GPU-fake-%lu",
                    static_cast<unsigned long>(reinterpret_cast<std::uintptr_t>(dev)));
      return k_nvml_success;
    };
    a.device_get_nvlink_state = [](NvmlDevice dev, unsigned link,
                                   NvmlEnableState* s) -> NvmlReturn {
      bool gpu3 = reinterpret_cast<std::uintptr_t>(dev) == 0x43 + 1;
      *s = (gpu3 && link == 17) ? 0 : k_nvml_feature_enabled;
      return k_nvml_success;
    };
    a.device_get_nvlink_remote_pci_info = [](NvmlDevice, unsigned link,
                                             NvmlPciInfo* info) -> NvmlReturn {
      if (g_hidden_remote) {
        std::snprintf(info->bus_id, sizeof info->bus_id, "FFFFFFFF:FF:FF.0");
      } else {
        std::snprintf(info->bus_id, sizeof info->bus_id, "00000000:%02X:00.0", 6 + link % 4);
      }
      return k_nvml_success;
    };
    a.device_get_p2p_status = [](NvmlDevice, NvmlDevice, int, NvmlP2PStatus* s) -> NvmlReturn {
      *s = k_nvml_p2p_status_ok;
      return k_nvml_success;
    };
    a.system_get_driver_version = [](char* out, unsigned n) -> NvmlReturn {
      std::snprintf(out, n, "570.999.01");
      return k_nvml_success;
    };
    return a;
  }();
  return api;
}

TEST(TopoProbe, NvmlGivesNamesAndNvlinks) {
  auto libs = host::Libraries::none("test");
  libs.nvml = []() -> Result<const host::dl::NvmlApi*> { return &fake_nvml(); };
  host::Host h(host::Sysroot(test::source_path("examples/dgx-h100")), host::Env({}, "test"), libs);
  auto snap = probe(h);
  EXPECT_EQ(snap.nvml, "ok");
  EXPECT_EQ(snap.driver_version, "570.999.01");
  ASSERT_EQ(snap.gpus.size(), 8u);
  EXPECT_EQ(snap.gpus[0].name_source, "nvml");
  EXPECT_EQ(snap.gpus[0].name, "NVIDIA H100 80GB HBM3 (nvml)");
  ASSERT_TRUE(snap.gpus[0].nvlinks.has_value());
  ASSERT_EQ(snap.gpus[0].nvlinks->size(), 18u);
  EXPECT_EQ((*snap.gpus[0].nvlinks)[1].remote_bdf, "0000:07:00.0");
  EXPECT_FALSE((*snap.gpus[3].nvlinks)[17].active);
  EXPECT_TRUE((*snap.gpus[3].nvlinks)[17].remote_bdf.empty());
  // Peer access is asked while NVML is open, one status per peer.
  ASSERT_TRUE(snap.gpus[2].p2p_read.has_value());
  EXPECT_EQ(snap.gpus[2].p2p_read->size(), 8u);
  EXPECT_EQ((*snap.gpus[2].p2p_write)[5], 0);
}

TEST(TopoProbe, NvlinkMatrixThroughVisibleOrHiddenSwitches) {
  auto libs = host::Libraries::none("test");
  libs.nvml = []() -> Result<const host::dl::NvmlApi*> { return &fake_nvml(); };
  host::Host h(host::Sysroot(test::source_path("examples/dgx-h100")), host::Env({}, "test"), libs);
  for (bool hidden : {false, true}) {
    g_hidden_remote = hidden;
    auto snap = probe(h);
    g_hidden_remote = false;
    EXPECT_EQ((*snap.gpus[0].nvlinks)[0].remote_bdf, hidden ? "" : "0000:06:00.0");
    EXPECT_EQ(gpu_path(snap, snap.gpus[0], snap.gpus[1]).label(), "NV18") << hidden;
    EXPECT_EQ(gpu_path(snap, snap.gpus[0], snap.gpus[3]).label(), "NV17") << hidden;
    EXPECT_EQ(gpu_path(snap, snap.gpus[0], snap.gpus[7]).label(), "NV18") << hidden;
  }
}

TEST(TopoProbe, NvmlUnavailableIsRecorded) {
  auto snap = probe_tree("gke-a4");
  EXPECT_NE(snap.nvml, "ok");
  EXPECT_FALSE(snap.nvml.empty());
}

}  // namespace
}  // namespace epkit::topo

namespace epkit::topo {
namespace {

// A VM that reports numa_node -1 (the lent H200 machines do): the NUMA node
// comes from the device's local CPUs, as nvidia-smi's NUMA affinity does.
TEST(TopoProbe, NumaFromLocalCpusWhenSysfsSaysMinusOne) {
  test::TempTree tree("examples/gke-a4");
  const std::string gpu = "/sys/bus/pci/devices/0000:93:00.0";
  tree.write(gpu + "/numa_node", "-1\n");
  auto without_nodes = probe(tree.host());
  EXPECT_EQ(without_nodes.gpus[4].pci.numa_node, -1);  // nothing to derive it from

  tree.write("/sys/devices/system/node/node0/cpulist", "0-55,112-167\n");
  tree.write("/sys/devices/system/node/node1/cpulist", "56-111,168-223\n");
  tree.write(gpu + "/local_cpulist", "56-111,168-223\n");
  auto snap = probe(tree.host());
  EXPECT_EQ(snap.gpus[4].pci.numa_node, 1);
  EXPECT_EQ(snap.gpus[0].pci.numa_node, 0);  // sysfs' own value is kept
}

}  // namespace
}  // namespace epkit::topo
