#include "env/lint.h"

#include <gtest/gtest.h>

#include <map>

#include "env/facts.h"
#include "env/job_env.h"
#include "support/paths.h"
#include "support/temp_tree.h"
#include "topo/example_host.h"
#include "topo/probe.h"

namespace epkit::env {
namespace {

struct Linted {
  std::vector<LintItem> items;
  const LintItem* find(std::string_view name, Problem problem) const {
    for (const auto& i : items) {
      if (i.name == name && i.problem == problem) return &i;
    }
    return nullptr;
  }
};

Linted lint_on(const std::string& node, const host::Env& job, PlanOptions options = {}) {
  auto host = test::example_host(node);
  topo::Snapshot snap = topo::probe(host);
  auto plan = make_plan(read_facts(host, snap), snap, options);
  EXPECT_TRUE(plan.ok());
  return {lint(*plan, job, snap)};
}

host::Env env_file(const std::string& relative) {
  auto env = read_job_env(test::source_path(relative));
  EXPECT_TRUE(env.ok()) << (env ? "" : env.error().message);
  return env ? *env : host::Env{};
}

TEST(EnvLint, Seed000NamesEachMistakeWithItsFix) {
  Linted l = lint_on("gke-a4", env_file("examples/env/gke-a4-seed000.env"));
  auto expect = [&](std::string_view name, Problem p, bool enforced, std::string_view fix) {
    const LintItem* i = l.find(name, p);
    ASSERT_NE(i, nullptr) << name << " " << to_string(p);
    EXPECT_EQ(i->enforced, enforced) << name;
    EXPECT_NE(i->fix.find(fix), std::string::npos) << name << ": " << i->fix;
  };
  expect("TORCH_NCCL_USE_COMM_NONBLOCKING", Problem::must_unset, true,
         "unset TORCH_NCCL_USE_COMM_NONBLOCKING");
  expect("NVSHMEM_IBGDA_NIC_HANDLER", Problem::different, true,
         "export NVSHMEM_IBGDA_NIC_HANDLER=gpu");
  expect("NVSHMEM_DISABLED_GDRCOPY", Problem::misspelt, false, "NVSHMEM_DISABLE_GDRCOPY");
  expect("NVSHMEM_IBGDA_SUPPORT", Problem::build_only, false, "unset NVSHMEM_IBGDA_SUPPORT");
  expect("NVSHMEM_USE_GDRCOPY", Problem::build_only, false, "unset NVSHMEM_USE_GDRCOPY");
  expect("DEEP_EP_DEVICE_TO_HCA_MAPPING", Problem::missing, true,
         "export DEEP_EP_DEVICE_TO_HCA_MAPPING=0:mlx5_0:1,1:mlx5_1:1");
  expect("NCCL_IB_GID_INDEX", Problem::missing, true, "export NCCL_IB_GID_INDEX=3");
  expect("NVSHMEM_IB_GID_INDEX", Problem::missing, true, "export NVSHMEM_IB_GID_INDEX=3");
  // Every RDMA device of the node is a rail NIC: NCCL's default is the plan,
  // so the unset NCCL_IB_HCA is INFO, not FAIL (it was FAIL).
  expect("NCCL_IB_HCA", Problem::missing, false, "export NCCL_IB_HCA='=mlx5_0:1");
  EXPECT_NE(l.find("NCCL_IB_HCA", Problem::missing)->handled.find("NCCL's default"),
            std::string::npos);
  expect("NVSHMEM_DISABLE_CUDA_VMM", Problem::missing, false, "NVSHMEM_DISABLE_CUDA_VMM=1");
}

// With an RDMA device that is no rail (here a bond beside the rails), NCCL's
// default would use it: an unset NCCL_IB_HCA stays FAIL.
TEST(EnvLint, UnsetHcaFailsWhereNcclsDefaultTakesANonRailNic) {
  test::TempTree tree("examples/gke-a4");
  tree.link("/sys/class/infiniband/mlx5_bond_0", "../../devices/virtual/infiniband/mlx5_bond_0");
  tree.write("/sys/devices/virtual/infiniband/mlx5_bond_0/ports/1/state", "4: ACTIVE\n");
  tree.write("/sys/devices/virtual/infiniband/mlx5_bond_0/ports/1/link_layer", "Ethernet\n");
  auto host = tree.host(host::Env({}, "test"));
  topo::Snapshot snap = topo::probe(host);
  auto plan = make_plan(read_facts(host, snap), snap, {});
  ASSERT_TRUE(plan.ok());
  Linted l{lint(*plan, host::Env({}, "test"), snap)};
  const LintItem* hca = l.find("NCCL_IB_HCA", Problem::missing);
  ASSERT_NE(hca, nullptr);
  EXPECT_TRUE(hca->enforced) << hca->message;
  EXPECT_TRUE(hca->handled.empty()) << hca->handled;
}

TEST(EnvLint, FixedEnvironmentHasNoDifference) {
  Linted l = lint_on("gke-a4", env_file("examples/env/gke-a4-fixed.env"));
  for (const auto& i : l.items) ADD_FAILURE() << to_string(i.problem) << ": " << i.message;
}

TEST(EnvLint, DeviceListsCompareByWhatTheySelect) {
  host::Env job({{"NCCL_SOCKET_IFNAME", "eth0,eth1"}, {"NCCL_IB_HCA", "mlx5"}}, "test");
  Linted l = lint_on("gke-a4", job);
  EXPECT_EQ(l.find("NCCL_SOCKET_IFNAME", Problem::different), nullptr);
  EXPECT_EQ(l.find("NCCL_IB_HCA", Problem::different), nullptr);
  host::Env wrong({{"NCCL_SOCKET_IFNAME", "eth2"}}, "test");
  EXPECT_NE(lint_on("gke-a4", wrong).find("NCCL_SOCKET_IFNAME", Problem::different), nullptr);
}

TEST(EnvLint, PerRankValuesAreJudgedWhenTheRankIsKnown) {
  host::Env job({{"NVSHMEM_HCA_LIST", "mlx5_3:1"}}, "test");
  EXPECT_EQ(lint_on("gke-a4", job).find("NVSHMEM_HCA_LIST", Problem::different), nullptr);
  EXPECT_NE(
      lint_on("gke-a4", job, {Profile::automatic, 2}).find("NVSHMEM_HCA_LIST", Problem::different),
      nullptr);
  host::Env none({}, "test");
  EXPECT_EQ(lint_on("gke-a4", none).find("NVSHMEM_HCA_LIST", Problem::missing), nullptr);
  EXPECT_NE(
      lint_on("gke-a4", none, {Profile::automatic, 2}).find("NVSHMEM_HCA_LIST", Problem::missing),
      nullptr);
}

TEST(EnvLint, NameTheFoundVersionDoesNotReadIsReported) {
  test::TempTree tree("examples/dgx-h100");
  tree.write("/usr/lib/x86_64-linux-gnu/libnccl.so.2.20.5", "");
  tree.link("/usr/lib/x86_64-linux-gnu/libnccl.so.2", "libnccl.so.2.20.5");
  auto host = tree.host();
  topo::Snapshot snap = topo::probe(host);
  auto plan = make_plan(read_facts(host, snap), snap, {});
  ASSERT_TRUE(plan.ok());
  host::Env job({{"NCCL_RAS_ENABLE", "0"}, {"NCCL_IB_TC", "41"}}, "test");
  std::vector<LintItem> unread;
  for (auto& item : lint(*plan, job, snap)) {
    if (item.problem == Problem::unread) unread.push_back(item);
  }
  ASSERT_EQ(unread.size(), 1u);  // NCCL_IB_TC is read by every release
  EXPECT_NE(unread[0].message.find("NCCL 2.20 on this node does not read NCCL_RAS_ENABLE"),
            std::string::npos)
      << unread[0].message;
  // A name no release of the table reads, with the version unknown.
  host::Env old({{"NCCL_LL_THRESHOLD", "0"}}, "test");
  Linted l = lint_on("dgx-h100", old);
  EXPECT_NE(l.find("NCCL_LL_THRESHOLD", Problem::unread), nullptr);
}

TEST(JobEnv, ReadsAKubernetesEnvList) {
  auto env = parse_k8s_env(
      "env:\n"
      "  # comment\n"
      "  - name: NCCL_IB_TC\n"
      "    value: \"52\"\n"
      "  - name: A_SECRET\n"
      "    valueFrom:\n"
      "      secretKeyRef:\n"
      "        name: s\n"
      "        key: k\n"
      "  - name: QUOTED\n"
      "    value: 'it''s'\n"
      "  - name: PLAIN\n"
      "    value: /usr/local/gib/lib64 # a comment\n",
      "test.yaml");
  ASSERT_TRUE(env.ok()) << env.error().message;
  EXPECT_EQ(env->get("NCCL_IB_TC"), "52");
  EXPECT_FALSE(env->has("A_SECRET"));
  EXPECT_EQ(env->get("QUOTED"), "it's");
  EXPECT_EQ(env->get("PLAIN"), "/usr/local/gib/lib64");
  EXPECT_TRUE(looks_like_k8s_env("# x\n- name: A\n  value: b\n"));
  EXPECT_FALSE(looks_like_k8s_env("A=b\n"));
  auto bad = parse_k8s_env("env:\n  - name: A\n  what is this\n", "bad.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("bad.yaml:3"), std::string::npos) << bad.error().message;
}

// `epkit env --format k8s` writes '$', '`' and control characters as \xNN so
// that sourcing the YAML runs nothing; the reader turns them back. Names are
// printable ASCII without '=', and a name listed twice is reported.
TEST(JobEnv, KubernetesEscapesNamesAndDuplicates) {
  auto env = parse_k8s_env(
      "env:\n"
      "  - name: A\n"
      "    value: \"x\\x24(id)\\x60\\x0ay\\u00e9\\\"\\\\\"\n",
      "k.yaml");
  ASSERT_TRUE(env.ok()) << env.error().message;
  EXPECT_EQ(env->get("A"), "x$(id)`\ny\xC3\xA9\"\\");
  auto weird = parse_k8s_env("env:\n  - name: NCCL_$(id) x\n    value: \"1\"\n", "w.yaml");
  ASSERT_FALSE(weird.ok());
  EXPECT_NE(weird.error().message.find("w.yaml:2"), std::string::npos);
  auto twice = parse_k8s_env("env:\n  - name: A\n    value: \"1\"\n  - name: A\n    value: \"2\"\n",
                             "t.yaml");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.error().message.find("t.yaml:4: A is listed twice (first on line 2)"),
            std::string::npos)
      << twice.error().message;
}

}  // namespace
}  // namespace epkit::env
