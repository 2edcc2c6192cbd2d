#include "runtime/gpu_share.h"

#include <gtest/gtest.h>

#include "runtime/launch.h"
#include "support/temp_tree.h"

namespace epkit::runtime {
namespace {

TEST(GpuShare, OneRankPerGpuWithoutSharing) {
  auto c = choose_device(3, 4, 8, false);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->device, 3);
  EXPECT_FALSE(c->shared);
  EXPECT_EQ(c->ranks_per_gpu, 1);
}

// Without the flag, today's refusal stays, and it names the way out.
TEST(GpuShare, TooFewGpusIsRefusedNamingTheFlag) {
  auto c = choose_device(1, 2, 1, false);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, ErrorCode::unavailable);
  EXPECT_NE(c.error().message.find("local rank 1 has no GPU: only 1 visible"), std::string::npos)
      << c.error().message;
  EXPECT_NE(c.error().message.find("--oversubscribe"), std::string::npos);
}

TEST(GpuShare, RanksTakeGpusRoundRobin) {
  for (int local = 0; local < 8; ++local) {
    auto c = choose_device(local, 8, 3, true);
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_EQ(c->device, local % 3);
    EXPECT_TRUE(c->shared);
    EXPECT_EQ(c->ranks_per_gpu, 3);
  }
  auto enough = choose_device(1, 2, 2, true);
  ASSERT_TRUE(enough.ok());
  EXPECT_FALSE(enough->shared);  // the flag alone shares nothing
  EXPECT_FALSE(choose_device(0, 2, 0, true).ok());
  EXPECT_FALSE(choose_device(2, 2, 1, true).ok());
}

// NCCL tells hosts apart by NCCL_HOSTID: each rank on a shared GPU gets its
// own, built on a faked node's id where one is given.
TEST(GpuShare, EachSharedRankIsItsOwnNcclHost) {
  host::Env plain({}, "test");
  EXPECT_EQ(shared_gpu_nccl_host_id(plain, "vm", 0), "vm-rank0");
  EXPECT_EQ(shared_gpu_nccl_host_id(plain, "vm", 3), "vm-rank3");
  host::Env faked({{"NCCL_HOSTID", "fake-b"}}, "test");
  EXPECT_EQ(shared_gpu_nccl_host_id(faked, "vm", 2), "fake-b-rank2");
}

TEST(GpuShare, MpsIsSeenThroughItsControlSocket) {
  test::TempTree tree;
  auto host = tree.host();
  auto off = detect_mps(host.env(), host.fs());
  EXPECT_FALSE(off.running);
  EXPECT_EQ(off.pipe_dir, "/tmp/nvidia-mps");
  tree.write("/tmp/nvidia-mps/control", "");
  EXPECT_TRUE(detect_mps(host.env(), host.fs()).running);

  auto moved = tree.host(host::Env({{"CUDA_MPS_PIPE_DIRECTORY", "/tmp/mps"}}, "test"));
  EXPECT_FALSE(detect_mps(moved.env(), moved.fs()).running);
  tree.write("/tmp/mps/control", "");
  auto on = detect_mps(moved.env(), moved.fs());
  EXPECT_TRUE(on.running);
  EXPECT_EQ(on.pipe_dir, "/tmp/mps");
}

TEST(GpuShare, NoticeSaysSharedUnrepresentativeAndHowToStartMps) {
  std::string off = shared_gpu_notice(4, 1, MpsState{false, "/tmp/nvidia-mps"});
  EXPECT_NE(off.find("4 ranks on 1 GPU"), std::string::npos) << off;
  EXPECT_NE(off.find("not representative"), std::string::npos) << off;
  EXPECT_NE(off.find("time-slice"), std::string::npos) << off;
  EXPECT_NE(off.find("nvidia-cuda-mps-control -d"), std::string::npos) << off;
  std::string on = shared_gpu_notice(4, 1, MpsState{true, "/tmp/nvidia-mps"});
  EXPECT_NE(on.find("MPS is running"), std::string::npos) << on;
  EXPECT_EQ(on.find("time-slice"), std::string::npos) << on;
}

// The agent's flag reaches its children through the environment, and a
// launcher's ranks can be told the same way.
TEST(GpuShare, TheFlagTravelsToSpawnedRanks) {
  LaunchOptions options;
  options.nproc_per_node = 4;
  options.share_gpus = true;
  auto agent = discover(host::Env({}, "test"), options);
  ASSERT_TRUE(agent.ok()) << agent.error().message;
  EXPECT_TRUE(agent->share_gpus);
  auto vars = child_env(*agent, 2);
  EXPECT_EQ(vars[k_share_gpus_var], "1");
  auto child =
      discover(host::Env(std::map<std::string, std::string>(vars.begin(), vars.end()), "test"));
  ASSERT_TRUE(child.ok()) << child.error().message;
  EXPECT_TRUE(child->share_gpus);
  EXPECT_EQ(child->local_rank, 2);

  options.share_gpus = false;
  auto unshared = discover(host::Env({}, "test"), options);
  ASSERT_TRUE(unshared.ok());
  EXPECT_EQ(child_env(*unshared, 0).count(k_share_gpus_var), 0u);

  auto bad = discover(host::Env({{"EPKIT_SHARE_GPUS", "yes"}}, "test"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("EPKIT_SHARE_GPUS='yes'"), std::string::npos);
}

}  // namespace
}  // namespace epkit::runtime
