#include "topo/model.h"

#include <gtest/gtest.h>

#include "support/temp_tree.h"
#include "topo/example_host.h"
#include "topo/probe.h"

namespace epkit::topo {
namespace {

const char* const k_a4_mapping =
    "0:mlx5_0:1,1:mlx5_1:1,2:mlx5_2:1,3:mlx5_3:1,4:mlx5_4:1,5:mlx5_5:1,6:mlx5_6:1,7:mlx5_7:1";

const RdmaNic& nic_named(const Snapshot& snap, const std::string& name) {
  for (const auto& n : snap.nics) {
    if (n.name == name) return n;
  }
  throw std::runtime_error("no NIC " + name);
}

TEST(TopoModel, GkeA4PathTypes) {
  auto snap = probe(test::example_host("gke-a4"));
  const auto& g = snap.gpus;
  EXPECT_EQ(gpu_path(snap, g[0], g[0]).label(), "X");
  EXPECT_EQ(gpu_path(snap, g[0], g[1]).label(), "PIX");
  EXPECT_EQ(gpu_path(snap, g[0], g[2]).label(), "NODE");  // other root complex, same NUMA node
  EXPECT_EQ(gpu_path(snap, g[0], g[4]).label(), "SYS");
  EXPECT_EQ(pci_path(g[0].pci, *nic_named(snap, "mlx5_0").pci).label(), "PIX");
  EXPECT_EQ(pci_path(g[0].pci, *nic_named(snap, "mlx5_2").pci).label(), "NODE");
  EXPECT_EQ(pci_path(g[0].pci, *nic_named(snap, "mlx5_7").pci).label(), "SYS");
}

TEST(TopoModel, PathTypesInsideOneRoot) {
  auto dev = [](std::string bdf, std::vector<std::string> bridges) {
    PciDevice d;
    d.bdf = std::move(bdf);
    d.root = "pci0000:00";
    d.bridges = std::move(bridges);
    d.numa_node = 0;
    return d;
  };
  auto a = dev("0000:04:00.0", {"0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"});
  auto b = dev("0000:05:00.0", {"0000:00:01.0", "0000:01:00.0", "0000:02:01.0"});
  auto c = dev("0000:06:00.0", {"0000:00:02.0"});
  auto d = dev("0000:07:00.0", {"0000:00:01.0", "0000:01:00.0", "0000:02:01.0", "0000:06:00.0"});
  EXPECT_EQ(pci_path(a, b).type, PathType::pxb);  // a sits under a second switch
  EXPECT_EQ(pci_path(b, d).type, PathType::pix);
  EXPECT_EQ(pci_path(a, c).type, PathType::phb);
  auto other_root = c;
  other_root.root = "pci0000:80";
  EXPECT_EQ(pci_path(a, other_root).type, PathType::node);
  other_root.numa_node = 1;
  EXPECT_EQ(pci_path(a, other_root).type, PathType::sys);
}

TEST(TopoModel, NvlinkCountsDirectAndThroughSwitches) {
  Snapshot snap;
  for (int i = 0; i < 3; ++i) {
    Gpu g;
    g.index = i;
    g.pci.bdf = "0000:0" + std::to_string(i + 1) + ":00.0";
    g.pci.root = "pci0000:0" + std::to_string(i);
    g.nvlinks = std::vector<NvLink>{};
    snap.gpus.push_back(g);
  }
  // GPU0 <-> GPU1 by 4 direct links; GPU2 has 18 to an NVSwitch and GPU0 2.
  for (int l = 0; l < 4; ++l) {
    snap.gpus[0].nvlinks->push_back({l, true, "0000:02:00.0"});
    snap.gpus[1].nvlinks->push_back({l, true, "0000:01:00.0"});
  }
  for (int l = 4; l < 6; ++l) snap.gpus[0].nvlinks->push_back({l, true, "0000:90:00.0"});
  snap.gpus[0].nvlinks->push_back({6, false, ""});
  for (int l = 0; l < 18; ++l) snap.gpus[2].nvlinks->push_back({l, true, "0000:90:00.0"});
  EXPECT_EQ(gpu_path(snap, snap.gpus[0], snap.gpus[1]).label(), "NV4");
  EXPECT_EQ(gpu_path(snap, snap.gpus[0], snap.gpus[2]).label(), "NV2");
  EXPECT_EQ(gpu_path(snap, snap.gpus[1], snap.gpus[2]).label(), "NODE");  // no switch link on GPU1
  // Remotes NVML does not report count as the fabric.
  for (int l = 4; l < 7; ++l) snap.gpus[1].nvlinks->push_back({l, true, ""});
  EXPECT_EQ(gpu_path(snap, snap.gpus[1], snap.gpus[2]).label(), "NV3");
  snap.gpus[1].nvlinks.reset();
  EXPECT_EQ(nvlink_count(snap, snap.gpus[1], snap.gpus[2]), 0);
}

TEST(TopoModel, GkeA4MappingIsOneNicPerGpu) {
  auto snap = probe(test::example_host("gke-a4"));
  auto choices = assign_nics(snap);
  ASSERT_EQ(choices.size(), 8u);
  EXPECT_EQ(deep_ep_mapping(choices), k_a4_mapping);
  EXPECT_EQ(nccl_ib_hca(choices),
            "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1");
  EXPECT_EQ(nvshmem_hca_list(choices[5]), "mlx5_5:1");
  for (const auto& c : choices) {
    EXPECT_EQ(c.path, PathType::pix);
    EXPECT_EQ(c.gid_index, 3);
    EXPECT_TRUE(c.port_active);
  }
}

TEST(TopoModel, DgxUsesComputeNicsNeverStorageOrBond) {
  auto snap = probe(test::example_host("dgx-h100"));
  auto choices = assign_nics(snap);
  EXPECT_EQ(deep_ep_mapping(choices), k_a4_mapping);
  for (const auto& c : choices) {
    EXPECT_NE(c.nic, "mlx5_8");
    EXPECT_NE(c.nic, "mlx5_9");
    EXPECT_NE(c.nic, "mlx5_bond_0");
    EXPECT_EQ(c.gid_index, -1);  // InfiniBand: no RoCE GID
  }
  auto usable = usable_nic_names(snap);
  EXPECT_EQ(std::count(usable.begin(), usable.end(), "mlx5_bond_0"), 0);
}

TEST(TopoModel, BondOnlyWhenNothingElse) {
  auto snap = probe(test::example_host("dgx-h100"));
  std::erase_if(snap.nics, [](const RdmaNic& n) { return !n.is_bond; });
  auto choices = assign_nics(snap);
  for (const auto& c : choices) EXPECT_EQ(c.nic, "mlx5_bond_0");
}

TEST(TopoModel, NicGoneMovesItsGpuToNearestOther) {
  test::TempTree tree("examples/gke-a4");
  tree.remove("/sys/class/infiniband/mlx5_0");
  auto choices = assign_nics(probe(tree.host()));
  EXPECT_EQ(choices[0].nic, "mlx5_1");  // same switch
  EXPECT_EQ(choices[0].path, PathType::pix);
  EXPECT_EQ(choices[1].nic, "mlx5_1");
  EXPECT_EQ(choices[2].nic, "mlx5_2");
}

TEST(TopoModel, PortDownMovesItsGpuToNearestOther) {
  test::TempTree tree("examples/gke-a4");
  tree.write("/sys/class/infiniband/mlx5_5/ports/1/state", "1: DOWN\n");
  tree.write("/sys/class/infiniband/mlx5_5/ports/1/phys_state", "3: Disabled\n");
  auto snap = probe(tree.host());
  auto choices = assign_nics(snap);
  EXPECT_EQ(choices[4].nic, "mlx5_4");
  EXPECT_EQ(choices[5].nic, "mlx5_4");  // shares the PIX NIC rather than cross a root
  for (const auto& c : choices) EXPECT_NE(c.nic, "mlx5_5");
  // Every port down: still a mapping, flagged as not active.
  for (auto& nic : snap.nics) {
    nic.ports[0].state_code = 1;
    nic.ports[0].state = "DOWN";
  }
  choices = assign_nics(snap);
  EXPECT_EQ(deep_ep_mapping(choices), k_a4_mapping);
  EXPECT_FALSE(choices[0].port_active);
}

TEST(TopoModel, SpreadsGpusOverEquallyNearNics) {
  // GPU0 reaches both NICs at PIX; GPU1 (below a second switch) only NIC b.
  // GPU0 must leave b to GPU1 although b sorts first.
  Snapshot snap;
  auto dev = [](std::string bdf, std::vector<std::string> bridges) {
    PciDevice d;
    d.bdf = std::move(bdf);
    d.root = "pci0000:00";
    d.bridges = std::move(bridges);
    return d;
  };
  Gpu g0;
  g0.index = 0;
  g0.pci = dev("0000:03:00.0", {"0000:00:01.0", "0000:01:00.0", "0000:02:00.0"});
  Gpu g1;
  g1.index = 1;
  g1.pci = dev("0000:05:00.0", {"0000:00:01.0", "0000:01:00.0", "0000:02:02.0", "0000:04:00.0"});
  RdmaNic b;
  b.name = "mlx5_0";
  b.pci = dev("0000:06:00.0", {"0000:00:01.0", "0000:01:00.0", "0000:02:02.0"});
  RdmaNic a;
  a.name = "mlx5_1";
  a.pci = dev("0000:07:00.0", {"0000:00:01.0", "0000:01:00.0", "0000:02:01.0"});
  snap.gpus = {g0, g1};
  snap.nics = {b, a};
  ASSERT_EQ(pci_path(g0.pci, *b.pci).type, PathType::pix);
  ASSERT_EQ(pci_path(g1.pci, *a.pci).type, PathType::pxb);
  auto choices = assign_nics(snap);
  EXPECT_EQ(deep_ep_mapping(choices), "0:mlx5_1:1,1:mlx5_0:1");
}

TEST(TopoModel, NoNicsNoMapping) {
  auto snap = probe(test::example_host("gke-a4"));
  snap.nics.clear();
  auto choices = assign_nics(snap);
  ASSERT_EQ(choices.size(), 8u);
  EXPECT_TRUE(choices[0].nic.empty());
  EXPECT_EQ(deep_ep_mapping(choices), "");
  EXPECT_EQ(nccl_ib_hca(choices), "");
}

TEST(TopoModel, MatrixTextHasLegendAndAffinity) {
  auto snap = probe(test::example_host("gke-a4"));
  auto m = build_matrix(snap);
  ASSERT_EQ(m.names.size(), 16u);
  EXPECT_EQ(m.cells[0][8], "PIX");    // GPU0 x NIC0
  EXPECT_EQ(m.cells[0][10], "NODE");  // GPU0 x NIC2
  EXPECT_EQ(m.cells[0][4], "SYS");    // GPU0 x GPU4
  auto text = render_matrix(m);
  EXPECT_NE(text.find("NIC0: mlx5_0"), std::string::npos);
  EXPECT_NE(text.find("Legend:"), std::string::npos);
  EXPECT_NE(text.find("0-55,112-167"), std::string::npos);
  EXPECT_NE(text.find("CPU Affinity"), std::string::npos);
}

TEST(TopoModel, NaturalOrder) {
  EXPECT_TRUE(natural_less("mlx5_2", "mlx5_10"));
  EXPECT_FALSE(natural_less("mlx5_10", "mlx5_2"));
  EXPECT_TRUE(natural_less("mlx5_9", "mlx5_bond_0"));
  EXPECT_FALSE(natural_less("mlx5_1", "mlx5_1"));
  EXPECT_TRUE(natural_less("mlx5_1", "mlx5_1a"));
}

}  // namespace
}  // namespace epkit::topo
