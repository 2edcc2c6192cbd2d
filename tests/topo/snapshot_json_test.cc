#include "topo/snapshot_json.h"

#include <gtest/gtest.h>

#include "topo/example_host.h"
#include "topo/probe.h"

namespace epkit::topo {
namespace {

TEST(TopoSnapshotJson, RoundTripsExampleTrees) {
  for (const char* name : {"gke-a4", "dgx-h100"}) {
    auto snap = probe(test::example_host(name));
    auto back = from_json(nlohmann::json::parse(to_json(snap).dump()));
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(*back, snap) << name;
    EXPECT_EQ(deep_ep_mapping(assign_nics(*back)), deep_ep_mapping(assign_nics(snap)));
  }
}

TEST(TopoSnapshotJson, RoundTripsNvlinksAndOptionalFields) {
  Snapshot snap;
  Gpu g;
  g.pci.bdf = "0000:18:00.0";
  g.pci.vendor = 0x10de;
  g.pci.class_code = 0x030200;
  g.nvlinks = std::vector<NvLink>{{0, true, "0000:06:00.0"}, {1, false, ""}};
  snap.gpus.push_back(g);
  Gpu no_nvml;
  no_nvml.pci.bdf = "0000:19:00.0";
  snap.gpus.push_back(no_nvml);
  RdmaNic nic;
  nic.name = "mlx5_0";  // no PCI device
  snap.nics.push_back(nic);
  NetDev lo;
  lo.name = "lo";
  lo.is_virtual = true;
  snap.netdevs.push_back(lo);
  snap.notes = {"cannot open /sys/x"};
  auto back = from_json(to_json(snap));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, snap);
  EXPECT_FALSE(back->gpus[1].nvlinks.has_value());
  EXPECT_TRUE(back->gpus[0].nvlinks.has_value());
}

TEST(TopoSnapshotJson, WrongTypesAreInvalidErrors) {
  auto bad = from_json(nlohmann::json::parse(R"({"gpus": [{"pci": {"numa_node": "zero"}}]})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::invalid);
  auto bad_hex = from_json(nlohmann::json::parse(R"({"gpus": [{"pci": {"vendor": "0xzz"}}]})"));
  EXPECT_FALSE(bad_hex.ok());
  auto not_array = from_json(nlohmann::json::parse(R"({"nics": 3})"));
  ASSERT_FALSE(not_array.ok());
  EXPECT_NE(not_array.error().message.find("nics"), std::string::npos);
  EXPECT_FALSE(from_json(nlohmann::json::array()).ok());
  auto empty = from_json(nlohmann::json::object());
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->gpus.empty());
}

TEST(TopoSnapshotJson, AssignmentJsonCarriesTheThreeForms) {
  auto snap = probe(test::example_host("gke-a4"));
  auto j = to_json(assign_nics(snap));
  EXPECT_EQ(
      j["DEEP_EP_DEVICE_TO_HCA_MAPPING"],
      "0:mlx5_0:1,1:mlx5_1:1,2:mlx5_2:1,3:mlx5_3:1,4:mlx5_4:1,5:mlx5_5:1,6:mlx5_6:1,7:mlx5_7:1");
  EXPECT_EQ(j["NCCL_IB_HCA"].get<std::string>().front(), '=');
  EXPECT_EQ(j["per_gpu"][2]["NVSHMEM_HCA_LIST"], "mlx5_2:1");
  EXPECT_EQ(j["per_gpu"][2]["roce_v2_ipv4_gid"], 3);
  auto m = to_json(build_matrix(snap));
  EXPECT_EQ(m["nic_legend"]["NIC0"], "mlx5_0");
  EXPECT_EQ(m["rows"][0]["cells"][8], "PIX");
}

}  // namespace
}  // namespace epkit::topo
