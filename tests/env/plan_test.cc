#include "env/plan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "env/facts.h"
#include "support/temp_tree.h"
#include "topo/example_host.h"
#include "topo/probe.h"

namespace epkit::env {
namespace {

struct Node {
  topo::Snapshot snap;
  NodeFacts facts;
};

Node read_node(const host::Host& host) {
  Node n;
  n.snap = topo::probe(host);
  n.facts = read_facts(host, n.snap);
  return n;
}

Plan plan_for(const Node& n, PlanOptions options = {}) {
  auto plan = make_plan(n.facts, n.snap, options);
  EXPECT_TRUE(plan.ok()) << (plan ? "" : plan.error().message);
  return plan ? *plan : Plan{};
}

std::string value_of(const Plan& plan, std::string_view name) {
  const Setting* s = plan.find(name);
  return s == nullptr ? std::string("(unset)") : s->value;
}

bool omitted(const Plan& plan, std::string_view name) {
  for (const auto& o : plan.omitted) {
    if (o.name == name) return true;
  }
  return false;
}

constexpr std::string_view k_a4_mapping =
    "0:mlx5_0:1,1:mlx5_1:1,2:mlx5_2:1,3:mlx5_3:1,4:mlx5_4:1,5:mlx5_5:1,6:mlx5_6:1,7:mlx5_7:1";

TEST(EnvPlan, GkeA4HasSeed001sRightSettingsAndNoneOfSeed000sMistakes) {
  Node n = read_node(test::example_host("gke-a4"));
  Plan plan = plan_for(n);
  EXPECT_EQ(plan.profile, Profile::gke_a4);
  EXPECT_NE(plan.profile_why.find("B200"), std::string::npos) << plan.profile_why;
  EXPECT_EQ(value_of(plan, "DEEP_EP_DEVICE_TO_HCA_MAPPING"), k_a4_mapping);
  EXPECT_EQ(value_of(plan, "NCCL_IB_HCA"),
            "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1");
  EXPECT_EQ(value_of(plan, "NCCL_IB_GID_INDEX"), "3");
  EXPECT_EQ(value_of(plan, "NVSHMEM_IB_GID_INDEX"), "3");
  EXPECT_EQ(value_of(plan, "NVSHMEM_IBGDA_NIC_HANDLER"), "gpu");  // PeerMappingOverride=1
  EXPECT_EQ(value_of(plan, "NVSHMEM_DISABLE_CUDA_VMM"), "1");
  EXPECT_EQ(value_of(plan, "NVSHMEM_ENABLE_NIC_PE_MAPPING"), "1");
  EXPECT_EQ(value_of(plan, "NVSHMEM_IB_ENABLE_IBGDA"), "1");
  EXPECT_EQ(value_of(plan, "NCCL_SOCKET_IFNAME"), "=eth0,eth1");
  const Setting* hca = plan.find("NVSHMEM_HCA_LIST");
  ASSERT_NE(hca, nullptr);
  EXPECT_TRUE(hca->value.empty());
  ASSERT_EQ(hca->per_rank.size(), 8u);
  EXPECT_EQ(hca->per_rank[5], "mlx5_5:1");
  // Seed 000's mistakes: *_HOME naming nothing, NCCL_NET=gIB without gIB,
  // TORCH_NCCL_USE_COMM_NONBLOCKING kept, RDMAV_DRIVERS, a build switch.
  for (const char* name :
       {"NVSHMEM_HOME", "GDRCOPY_HOME", "NCCL_NET", "RDMAV_DRIVERS", "NVSHMEM_IBGDA_SUPPORT",
        "NVSHMEM_REMOTE_TRANSPORT", "LD_PRELOAD", "TORCH_NCCL_USE_COMM_NONBLOCKING"}) {
    EXPECT_EQ(plan.find(name), nullptr) << name;
  }
  EXPECT_TRUE(plan.unsets_name("TORCH_NCCL_USE_COMM_NONBLOCKING"));
  EXPECT_TRUE(omitted(plan, "NVSHMEM_HOME"));
  EXPECT_TRUE(omitted(plan, "NCCL_TUNER_CONFIG_PATH"));  // no gIB in the example
  EXPECT_TRUE(plan.sources.empty());
  // NCCL's version is unknown here: names read since 2.21 are not emitted.
  EXPECT_EQ(plan.find("NCCL_IB_ADDR_FAMILY"), nullptr);
}

TEST(EnvPlan, LocalRankPicksItsNic) {
  Node n = read_node(test::example_host("gke-a4"));
  Plan plan = plan_for(n, {Profile::automatic, 3});
  EXPECT_EQ(value_of(plan, "NVSHMEM_HCA_LIST"), "mlx5_3:1");
  auto bad = make_plan(n.facts, n.snap, {Profile::automatic, 8});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("8 GPUs"), std::string::npos) << bad.error().message;
}

TEST(EnvPlan, DgxH100IsInfiniBandWithRailsOnly) {
  Node n = read_node(test::example_host("dgx-h100"));
  Plan plan = plan_for(n);
  EXPECT_EQ(plan.profile, Profile::ib);
  std::string hca = value_of(plan, "NCCL_IB_HCA");
  EXPECT_EQ(hca.find("bond"), std::string::npos) << hca;
  EXPECT_EQ(plan.find("NCCL_IB_GID_INDEX"), nullptr);
  EXPECT_EQ(plan.find("NVSHMEM_IB_GID_INDEX"), nullptr);
  EXPECT_EQ(plan.find("NVSHMEM_DISABLE_CUDA_VMM"), nullptr);  // not Google Cloud
  EXPECT_FALSE(plan.unsets_name("TORCH_NCCL_USE_COMM_NONBLOCKING"));
}

TEST(EnvPlan, GivenProfileIsKeptAndAutoIsExplained) {
  Node n = read_node(test::example_host("dgx-h100"));
  Plan plan = plan_for(n, {Profile::nvlink_only, std::nullopt});
  EXPECT_EQ(plan.profile, Profile::nvlink_only);
  EXPECT_NE(plan.profile_why.find("auto would pick ib"), std::string::npos) << plan.profile_why;
  EXPECT_EQ(value_of(plan, "NVSHMEM_REMOTE_TRANSPORT"), "none");
  EXPECT_EQ(plan.find("DEEP_EP_DEVICE_TO_HCA_MAPPING"), nullptr);
  EXPECT_FALSE(parse_profile("gke-a5").ok());
}

// NIC names that do not follow the GPUs: the rail under GPU0's PCIe switch
// is called mlx5_7 and the one under GPU7's is mlx5_0. The mapping follows
// the switches.
TEST(EnvPlan, MappingFollowsPcieSwitchesNotNames) {
  test::TempTree tree("examples/gke-a4");
  namespace fs = std::filesystem;
  std::string a = "/sys/devices/pci0000:10/0000:10:01.0/0000:11:00.0/0000:12:02.0/0000:15:00.0";
  std::string b = "/sys/devices/pci0000:b0/0000:b0:01.0/0000:b1:00.0/0000:b2:03.0/0000:b6:00.0";
  fs::rename(tree.path(a + "/infiniband/mlx5_0"), tree.path(a + "/infiniband/tmp"));
  fs::rename(tree.path(b + "/infiniband/mlx5_7"), tree.path(b + "/infiniband/mlx5_0"));
  fs::rename(tree.path(a + "/infiniband/tmp"), tree.path(a + "/infiniband/mlx5_7"));
  tree.remove("/sys/class/infiniband/mlx5_0");
  tree.remove("/sys/class/infiniband/mlx5_7");
  tree.link("/sys/class/infiniband/mlx5_0", "../../devices" + b.substr(12) + "/infiniband/mlx5_0");
  tree.link("/sys/class/infiniband/mlx5_7", "../../devices" + a.substr(12) + "/infiniband/mlx5_7");
  Node n = read_node(tree.host());
  Plan plan = plan_for(n);
  // Two GPUs and two NICs sit under each switch: the names swapped between
  // the first and the last switch move with their devices.
  const Setting* list = plan.find("NVSHMEM_HCA_LIST");
  ASSERT_NE(list, nullptr);
  ASSERT_EQ(list->per_rank.size(), 8u);
  auto pair = [&](int x, int y) {
    std::set<std::string> s{list->per_rank[x], list->per_rank[y]};
    return s;
  };
  EXPECT_EQ(pair(0, 1), (std::set<std::string>{"mlx5_1:1", "mlx5_7:1"}));
  EXPECT_EQ(pair(6, 7), (std::set<std::string>{"mlx5_0:1", "mlx5_6:1"}));
  EXPECT_EQ(pair(2, 3), (std::set<std::string>{"mlx5_2:1", "mlx5_3:1"}));
  std::string mapping = value_of(plan, "DEEP_EP_DEVICE_TO_HCA_MAPPING");
  EXPECT_EQ(mapping.find("0:mlx5_0:1"), std::string::npos) << mapping;
  EXPECT_EQ(mapping.find("7:mlx5_7:1"), std::string::npos) << mapping;
}

TEST(EnvPlan, GibNodeSourcesGooglesScriptAndNamesItsTunerConfig) {
  test::TempTree tree("examples/gke-a4");
  tree.write("/usr/local/gib/scripts/set_nccl_env.sh", "export NCCL_NET=gIB\n");
  tree.write("/usr/local/gib/configs/tuner_config_a3u.txtpb", "");
  tree.write("/usr/local/gib/configs/tuner_config_a4.txtpb", "");
  tree.mkdir("/usr/local/gib/lib64");
  Node n = read_node(tree.host());
  Plan plan = plan_for(n);
  ASSERT_EQ(plan.sources.size(), 1u);
  EXPECT_EQ(plan.sources[0].path, "/usr/local/gib/scripts/set_nccl_env.sh");
  EXPECT_EQ(value_of(plan, "NCCL_TUNER_CONFIG_PATH"),
            "/usr/local/gib/configs/tuner_config_a4.txtpb");
  EXPECT_EQ(value_of(plan, "LD_LIBRARY_PATH"), "/usr/local/gib/lib64");
  // Nothing of the script's is copied.
  EXPECT_EQ(plan.find("NCCL_NET"), nullptr);
  Plan a3u = plan_for(n, {Profile::gke_a3_ultra, std::nullopt});
  EXPECT_EQ(value_of(a3u, "NCCL_TUNER_CONFIG_PATH"),
            "/usr/local/gib/configs/tuner_config_a3u.txtpb");
}

TEST(EnvPlan, NicHandlerFollowsTheDriverParameters) {
  test::TempTree tree("examples/gke-a4");
  tree.write("/proc/driver/nvidia/params", "RegistryDwords: \"\"\n");
  Node n = read_node(tree.host());
  Plan plan = plan_for(n);
  EXPECT_EQ(plan.find("NVSHMEM_IBGDA_NIC_HANDLER"), nullptr);
  EXPECT_TRUE(omitted(plan, "NVSHMEM_IBGDA_NIC_HANDLER"));
  EXPECT_FALSE(peer_mapping_override("PeerMappingOverride=0;"));
  EXPECT_TRUE(peer_mapping_override("\"RmFoo=1; PeerMappingOverride=1;\""));
}

TEST(EnvPlan, NameTheLibraryDoesNotReadIsLeftOut) {
  test::TempTree tree("examples/dgx-h100");
  tree.write("/usr/lib/x86_64-linux-gnu/libnccl.so.2.20.5", "");
  tree.link("/usr/lib/x86_64-linux-gnu/libnccl.so.2", "libnccl.so.2.20.5");
  Node n = read_node(tree.host());
  ASSERT_TRUE(n.facts.nccl.has_value());
  EXPECT_EQ(n.facts.nccl->version, (Version{2, 20}));
  Plan plan = plan_for(n);
  EXPECT_NE(plan.nccl_version.find("2.20"), std::string::npos) << plan.nccl_version;
}

}  // namespace
}  // namespace epkit::env
