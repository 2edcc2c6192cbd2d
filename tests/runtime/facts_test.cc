#include "runtime/facts.h"

#include <gtest/gtest.h>

#include <thread>

#include "runtime/store.h"
#include "support/temp_tree.h"

namespace epkit::runtime {
namespace {

RankFacts rank_on(const std::string& host, int rank, const std::string& gpu) {
  RankFacts f;
  f.rank = rank;
  f.local_rank = rank % 2;
  f.host = host;
  f.host_id = host;
  f.gpu_uuid = gpu;
  f.pci_bus_id = "0000:1b:00.0";
  f.driver_version = "550.54.15";
  f.cuda_version = "12.4";
  f.nccl_version = "2.21.5";
  f.nccl_library = "/usr/lib/libnccl.so.2";
  f.network_env = {{"NCCL_IB_HCA", "mlx5_0,mlx5_1"}};
  f.hcas = {"mlx5_0", "mlx5_1"};
  return f;
}

// Two nodes, two ranks each, all alike.
std::vector<RankFacts> cluster() {
  return {rank_on("a", 0, "GPU-a0"), rank_on("a", 1, "GPU-a1"), rank_on("b", 2, "GPU-b0"),
          rank_on("b", 3, "GPU-b1")};
}

std::optional<Mismatch> find_kind(const std::vector<Mismatch>& all, MismatchKind kind) {
  for (const auto& m : all) {
    if (m.kind == kind) return m;
  }
  return std::nullopt;
}

TEST(Facts, HomogeneousRanksHaveNoMismatch) {
  auto mismatches = compare_facts(cluster());
  EXPECT_TRUE(mismatches.empty()) << mismatches.front().summary;
}

TEST(Facts, DifferingNcclVersionBlamesTheMinority) {
  auto facts = cluster();
  facts[3].nccl_version = "2.19.3";
  auto mismatches = compare_facts(facts);
  ASSERT_EQ(mismatches.size(), 1u);
  EXPECT_EQ(mismatches[0].kind, MismatchKind::nccl_version);
  EXPECT_EQ(mismatches[0].ranks, std::vector<int>{3});
  EXPECT_NE(mismatches[0].summary.find("2.19.3 on b:3"), std::string::npos)
      << mismatches[0].summary;
  EXPECT_NE(mismatches[0].summary.find("2.21.5 on a:0,1; b:2"), std::string::npos)
      << mismatches[0].summary;
}

TEST(Facts, OneGpuUsedTwiceOnAHost) {
  auto facts = cluster();
  facts[1].gpu_uuid = "GPU-a0";
  auto mismatch = find_kind(compare_facts(facts), MismatchKind::duplicate_gpu);
  ASSERT_TRUE(mismatch.has_value());
  EXPECT_EQ(mismatch->ranks, (std::vector<int>{0, 1}));
  EXPECT_NE(mismatch->summary.find("a:0,1 share GPU GPU-a0"), std::string::npos)
      << mismatch->summary;
  // The same UUID on two hosts is not one GPU (fake hosts or copied ids).
  facts = cluster();
  facts[2].gpu_uuid = "GPU-a0";
  EXPECT_FALSE(find_kind(compare_facts(facts), MismatchKind::duplicate_gpu).has_value());
  // Without UUIDs the PCI bus id decides.
  facts = cluster();
  for (auto& f : facts) f.gpu_uuid.clear();
  auto by_pci = find_kind(compare_facts(facts), MismatchKind::duplicate_gpu);
  ASSERT_TRUE(by_pci.has_value());
  EXPECT_EQ(by_pci->ranks.size(), 2u);
  // Ranks that share a GPU on purpose (--oversubscribe) say so.
  facts = cluster();
  facts[1].gpu_uuid = "GPU-a0";
  facts[0].shared_gpu = facts[1].shared_gpu = true;
  EXPECT_FALSE(find_kind(compare_facts(facts), MismatchKind::duplicate_gpu).has_value());
}

TEST(Facts, NetworkEnvDifferingBetweenNodes) {
  auto facts = cluster();
  facts[2].network_env["NCCL_IB_HCA"] = "mlx5_2";
  facts[3].network_env["NCCL_IB_HCA"] = "mlx5_2";
  facts.push_back(rank_on("c", 4, "GPU-c0"));
  auto mismatch = find_kind(compare_facts(facts), MismatchKind::network_env);
  ASSERT_TRUE(mismatch.has_value());
  EXPECT_EQ(mismatch->ranks, (std::vector<int>{2, 3}));
  EXPECT_NE(mismatch->summary.find("NCCL_IB_HCA differs between nodes"), std::string::npos);
  EXPECT_NE(mismatch->summary.find("'mlx5_2' on b"), std::string::npos) << mismatch->summary;

  // Set on one node, unset on the other.
  facts = cluster();
  facts[0].network_env["NVSHMEM_DISABLE_P2P"] = "1";
  facts[1].network_env["NVSHMEM_DISABLE_P2P"] = "1";
  mismatch = find_kind(compare_facts(facts), MismatchKind::network_env);
  ASSERT_TRUE(mismatch.has_value());
  EXPECT_NE(mismatch->summary.find("unset on b"), std::string::npos) << mismatch->summary;
}

TEST(Facts, PerRankSettingsAreFineWhenEveryNodeDoesTheSame) {
  auto facts = cluster();
  for (auto& f : facts) f.network_env["NCCL_IB_HCA"] = "mlx5_" + std::to_string(f.local_rank);
  EXPECT_TRUE(compare_facts(facts).empty());
  facts[3].network_env["NCCL_IB_HCA"] = "mlx5_0";  // node b now uses one HCA twice
  EXPECT_TRUE(find_kind(compare_facts(facts), MismatchKind::network_env).has_value());
}

TEST(Facts, HcaSetsDifferingBetweenNodes) {
  auto facts = cluster();
  facts[2].hcas = {"mlx5_0"};
  facts[3].hcas = {"mlx5_0"};
  facts.push_back(rank_on("c", 4, "GPU-c0"));
  auto mismatch = find_kind(compare_facts(facts), MismatchKind::hca_set);
  ASSERT_TRUE(mismatch.has_value());
  EXPECT_EQ(mismatch->ranks, (std::vector<int>{2, 3}));
  EXPECT_NE(mismatch->summary.find("{mlx5_0} on b"), std::string::npos) << mismatch->summary;
}

TEST(Facts, JsonRoundTripAndBadInput) {
  auto f = rank_on("a", 1, "GPU-a1");
  auto back = facts_from_json(facts_to_json(f));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->host, "a");
  EXPECT_EQ(back->network_env, f.network_env);
  EXPECT_EQ(back->hcas, f.hcas);
  EXPECT_FALSE(back->shared_gpu);
  f.shared_gpu = true;
  EXPECT_TRUE(facts_from_json(facts_to_json(f))->shared_gpu);
  for (const char* bad : {"", "[]", "{\"rank\": 1}", "{\"rank\": \"x\"}", "\xff\xfe"}) {
    auto parsed = facts_from_json(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.error().code, ErrorCode::invalid);
  }
}

TEST(Facts, CollectsHostFactsThroughTheSysroot) {
  test::TempTree tree;
  tree.write("/proc/sys/kernel/hostname", "node-7\n");
  tree.write("/proc/driver/nvidia/version",
             "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build\n");
  tree.write("/sys/class/infiniband/mlx5_1/ports/1/state", "4: ACTIVE\n");
  tree.write("/sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  host::Env env(
      {{"NCCL_DEBUG", "INFO"}, {"NVSHMEM_BOOTSTRAP", "MPI"}, {"NCCL_EMPTY", ""}, {"PATH", "/bin"}});
  host::Host node(host::Sysroot(tree.root()), env);
  auto facts = collect_host_facts(node, 3, 1);
  EXPECT_EQ(facts.host, "node-7");
  EXPECT_EQ(facts.driver_version, "550.54.15");
  EXPECT_EQ(facts.hcas, (std::vector<std::string>{"mlx5_0", "mlx5_1"}));
  EXPECT_EQ(facts.network_env, (std::map<std::string, std::string>{{"NCCL_DEBUG", "INFO"},
                                                                   {"NVSHMEM_BOOTSTRAP", "MPI"}}));
  EXPECT_EQ(facts.rank, 3);
  EXPECT_EQ(facts.host_id, "node-7");

  // A faked node: NCCL_HOSTID names it and is not compared as a setting.
  env.set("NCCL_HOSTID", "fake-b");
  auto faked = collect_host_facts(host::Host(host::Sysroot(tree.root()), env), 1, 0);
  EXPECT_EQ(faked.host, "node-7");
  EXPECT_EQ(faked.host_id, "fake-b");
  EXPECT_EQ(faked.network_env.count("NCCL_HOSTID"), 0u);

  test::TempTree empty;
  auto none = collect_host_facts(host::Host(host::Sysroot(empty.root()), host::Env()), 0, 0);
  EXPECT_EQ(none.host, "unknown");
  EXPECT_TRUE(none.driver_version.empty());
  EXPECT_TRUE(none.hcas.empty());
}

TEST(Facts, ExchangedThroughTheStore) {
  ServerOptions options;
  options.bind_addr = "127.0.0.1";
  options.world_size = 2;
  auto server = StoreServer::start(options);
  ASSERT_TRUE(server.ok());
  auto run_rank = [&](int rank, Result<std::vector<RankFacts>>* out) {
    ClientOptions client;
    client.port = (*server)->port();
    client.rank = rank;
    client.world_size = 2;
    client.my_host = rank == 0 ? "a" : "b";
    auto store = Store::connect(client, Deadline::after(std::chrono::seconds(5)));
    if (!store) {
      *out = store.error();
      return;
    }
    auto mine = rank_on(client.my_host, rank, "GPU-" + std::to_string(rank));
    if (rank == 1) mine.nccl_version = "2.19.3";
    *out = exchange_facts(*store, mine, 2, Deadline::after(std::chrono::seconds(5)));
    store->close();  // a rank that leaves without close() counts as crashed
  };
  Result<std::vector<RankFacts>> zero = Error{}, one = Error{};
  std::thread other(run_rank, 1, &one);
  run_rank(0, &zero);
  other.join();
  ASSERT_TRUE(zero.ok()) << zero.error().message;
  ASSERT_TRUE(one.ok()) << one.error().message;
  ASSERT_EQ(zero->size(), 2u);
  EXPECT_EQ((*zero)[1].host, "b");
  auto mismatch = find_kind(compare_facts(*one), MismatchKind::nccl_version);
  ASSERT_TRUE(mismatch.has_value());
  EXPECT_NE(mismatch->summary.find("2.19.3 on b:1"), std::string::npos) << mismatch->summary;
}

}  // namespace
}  // namespace epkit::runtime
