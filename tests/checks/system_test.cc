#include <gtest/gtest.h>

#include "checks/check_fixture.h"

namespace epkit::checks {
namespace {

using test::describe;
using test::make_snapshot;
using test::mentions;
using test::run_check;
using test::TempTree;

constexpr const char* k_limits_8m =
    "Limit                     Soft Limit           Hard Limit           Units     \n"
    "Max open files            1048576              1048576              files     \n"
    "Max locked memory         8388608              8388608              bytes     \n";
constexpr const char* k_limits_unlimited =
    "Limit                     Soft Limit           Hard Limit           Units     \n"
    "Max locked memory         unlimited            unlimited            bytes     \n";
// CapEff without bit 14 (Docker's default set) and with all capabilities.
constexpr const char* k_status_default = "Name:\tepkit\nCapEff:\t00000000a80425fb\n";
constexpr const char* k_status_all = "Name:\tepkit\nCapEff:\t000001ffffffffff\n";

void write_limits(const TempTree& tree, const char* limits, const char* status,
                  const char* shm_options = "rw,nosuid,nodev,size=16777216k,inode64") {
  tree.write("/proc/self/limits", limits);
  tree.write("/proc/self/status", status);
  tree.write("/proc/self/mounts",
             std::string("overlay / overlay rw 0 0\nshm /dev/shm tmpfs ") + shm_options + " 0 0\n");
  tree.write("/proc/meminfo", "MemTotal:       2113389168 kB\nMemFree: 1 kB\n");
}

TEST(ContainerLimits, NoGpuNoRdmaSkipsButShowsWhatItRead) {
  TempTree tree;
  write_limits(tree, k_limits_8m, k_status_default);
  auto out = run_check("container.limits", tree, {}, make_snapshot(0));
  EXPECT_EQ(out.status, Status::skip) << describe(out);
  EXPECT_EQ(out.evidence.size(), 3u) << describe(out);
}

TEST(ContainerLimits, SmallShmWarnsWithSeveralGpus) {
  TempTree tree;
  write_limits(tree, k_limits_unlimited, k_status_default, "rw,nosuid,nodev,size=65536k");
  auto out = run_check("container.limits", tree, {}, make_snapshot(8));
  EXPECT_EQ(out.status, Status::warn) << describe(out);
  EXPECT_TRUE(mentions(out, "--shm-size")) << describe(out);
  EXPECT_EQ(run_check("container.limits", tree, {}, make_snapshot(1)).status, Status::pass);
  write_limits(tree, k_limits_unlimited, k_status_default);
  EXPECT_EQ(run_check("container.limits", tree, {}, make_snapshot(8)).status, Status::pass);
}

TEST(ContainerLimits, ShmSizeForms) {
  TempTree tree;
  // No size=: half of RAM. A percentage: of RAM. Both large here.
  write_limits(tree, k_limits_unlimited, k_status_default, "rw,nosuid");
  EXPECT_EQ(run_check("container.limits", tree, {}, make_snapshot(8)).status, Status::pass);
  write_limits(tree, k_limits_unlimited, k_status_default, "rw,size=50%");
  EXPECT_EQ(run_check("container.limits", tree, {}, make_snapshot(8)).status, Status::pass);
  write_limits(tree, k_limits_unlimited, k_status_default, "rw,size=512m");
  EXPECT_EQ(run_check("container.limits", tree, {}, make_snapshot(8)).status, Status::warn);
}

TEST(ContainerLimits, LockedMemoryWithoutIpcLockFailsWithRdma) {
  TempTree tree;
  write_limits(tree, k_limits_8m, k_status_default);
  auto snap = make_snapshot(8, {"mlx5_0"});
  auto out = run_check("container.limits", tree, {}, snap);
  EXPECT_EQ(out.status, Status::fail) << describe(out);
  EXPECT_TRUE(mentions(out, "--ulimit memlock=-1")) << describe(out);
  EXPECT_TRUE(mentions(out, "IPC_LOCK")) << describe(out);
  // Either unlimited memlock or CAP_IPC_LOCK is enough for the kernel.
  write_limits(tree, k_limits_unlimited, k_status_default);
  EXPECT_EQ(run_check("container.limits", tree, {}, snap).status, Status::pass);
  write_limits(tree, k_limits_8m, k_status_all);
  EXPECT_EQ(run_check("container.limits", tree, {}, snap).status, Status::pass);
  // Without RDMA devices the limit does not matter.
  write_limits(tree, k_limits_8m, k_status_default);
  EXPECT_EQ(run_check("container.limits", tree, {}, make_snapshot(1)).status, Status::pass);
}

TEST(ContainerLimits, UnreadableLimitsAreUnknown) {
  TempTree tree;
  write_limits(tree, k_limits_8m, k_status_default);
  tree.remove("/proc/self/limits");
  auto out = run_check("container.limits", tree, {}, make_snapshot(8, {"mlx5_0"}));
  EXPECT_EQ(out.status, Status::unknown) << describe(out);
  tree.write("/proc/self/limits", "garbage\n");
  EXPECT_EQ(run_check("container.limits", tree, {}, make_snapshot(8, {"mlx5_0"})).status,
            Status::unknown);
}

// Files as read on a lent H200 node (container, no RDMA): a /dev/shm mounted
// twice (the last mount wins), memlock unlimited, modules without refcounts.
TEST(ContainerLimits, RealH200NodeFiles) {
  TempTree tree;
  tree.write("/proc/self/mounts",
             "overlay / overlay rw,relatime 0 0\n"
             "tmpfs /dev/shm tmpfs rw,relatime,size=131981020k 0 0\n"
             "tmpfs /dev/shm tmpfs rw,relatime,size=65536k 0 0\n"
             "tmpfs /dev/shm tmpfs rw,relatime,size=134217728k 0 0\n");
  tree.write("/proc/self/limits",
             "Max locked memory         unlimited            unlimited            bytes     \n");
  tree.write("/proc/self/status", "CapEff:\t000001fffeffffff\n");
  auto out = run_check("container.limits", tree, {}, make_snapshot(4, {"mlx5_0"}));
  EXPECT_EQ(out.status, Status::pass) << describe(out);
  // The middle (64 MiB) mount is hidden by the last one; dropping the last exposes it.
  tree.write("/proc/self/mounts",
             "tmpfs /dev/shm tmpfs rw,relatime,size=131981020k 0 0\n"
             "tmpfs /dev/shm tmpfs rw,relatime,size=65536k 0 0\n");
  EXPECT_EQ(run_check("container.limits", tree, {}, make_snapshot(4, {"mlx5_0"})).status,
            Status::warn);
}

constexpr const char* k_modules_gpu =
    "nvidia_uvm 4956160 0 - Live 0x0000000000000000 (POE)\n"
    "nvidia 14376960 100 nvidia_uvm, Live 0x0000000000000000 (POE)\n";
constexpr const char* k_peermem = "nvidia_peermem 16384 0 - Live 0x0000000000000000 (OE)\n";

TEST(KernelModules, NoGpuSkips) {
  TempTree tree;
  EXPECT_EQ(run_check("kernel.modules", tree, {}, make_snapshot(0)).status, Status::skip);
}

TEST(KernelModules, UnreadableModulesIsUnknown) {
  TempTree tree;
  EXPECT_EQ(run_check("kernel.modules", tree, {}, make_snapshot(1)).status, Status::unknown);
}

TEST(KernelModules, RealH200NodeModules) {
  TempTree tree;
  tree.write("/proc/modules",
             "nvidia_uvm 1830912 - - Live 0xffffffffc080c000 (O)\n"
             "nvidia 14299136 - - Live 0xffffffffc0400000 (O)\n");
  auto out = run_check("kernel.modules", tree, {}, make_snapshot(4));
  EXPECT_EQ(out.status, Status::pass) << describe(out);
}

TEST(KernelModules, NvidiaModulesRequired) {
  TempTree tree;
  tree.write("/proc/modules", "nvidia 14376960 100 - Live 0x0 (POE)\n");
  auto out = run_check("kernel.modules", tree, {}, make_snapshot(1));
  EXPECT_EQ(out.status, Status::fail) << describe(out);
  EXPECT_EQ(out.fix, "modprobe nvidia_uvm");
  tree.write("/proc/modules", k_modules_gpu);
  EXPECT_EQ(run_check("kernel.modules", tree, {}, make_snapshot(1)).status, Status::pass);
}

TEST(KernelModules, PeermemWhenTheConfigurationNeedsIt) {
  TempTree tree;
  tree.write("/proc/modules", k_modules_gpu);
  auto snap = make_snapshot(8, {"mlx5_0"});
  auto informational = run_check("kernel.modules", tree, {}, snap);
  EXPECT_EQ(informational.status, Status::pass) << describe(informational);
  EXPECT_TRUE(mentions(informational, "DMA-BUF"));
  for (auto vars :
       std::vector<std::map<std::string, std::string>>{{{"NVSHMEM_IB_ENABLE_IBGDA", "1"}},
                                                       {{"USE_NVPEERMEM", "1"}},
                                                       {{"NCCL_DMABUF_ENABLE", "0"}}}) {
    auto out = run_check("kernel.modules", tree, vars, snap);
    EXPECT_EQ(out.status, Status::fail) << describe(out);
    EXPECT_TRUE(mentions(out, "modprobe nvidia_peermem"));
  }
  tree.write("/proc/modules", std::string(k_modules_gpu) + k_peermem);
  EXPECT_EQ(run_check("kernel.modules", tree, {{"USE_NVPEERMEM", "1"}}, snap).status, Status::pass);
}

TEST(KernelModules, GdrdrvWhenGdrcopyIsAskedFor) {
  TempTree tree;
  tree.write("/proc/modules", k_modules_gpu);
  auto snap = make_snapshot(1);
  EXPECT_EQ(run_check("kernel.modules", tree, {{"NVSHMEM_USE_GDRCOPY", "1"}}, snap).status,
            Status::fail);
  EXPECT_EQ(run_check("kernel.modules", tree, {{"GDRCOPY_HOME", "/usr/local/nvidia"}}, snap).status,
            Status::warn);
  tree.write("/proc/modules", std::string(k_modules_gpu) + "gdrdrv 24576 0 - Live 0x0 (OE)\n");
  EXPECT_EQ(run_check("kernel.modules", tree, {{"NVSHMEM_USE_GDRCOPY", "1"}}, snap).status,
            Status::pass);
}

// Every check of these groups runs on an empty tree and snapshot without
// throwing, and says something.
TEST(OwnedChecks, EmptyNodeNeitherCrashesNorStaysSilent) {
  TempTree tree;
  for (const char* id : {"nccl.net-plugin", "nccl.ifname", "env.paths", "env.unknown-vars",
                         "env.plan", "nvshmem.ibgda", "container.limits", "kernel.modules"}) {
    ASSERT_NE(find_check(id), nullptr) << id;
    auto out = run_check(id, tree, {});
    EXPECT_FALSE(out.summary.empty()) << id;
    // With everything set and nothing on the node, still no crash.
    auto loaded = run_check(id, tree,
                            {{"NCCL_NET", "gIB"},
                             {"NCCL_SOCKET_IFNAME", "^"},
                             {"NCCL_IB_HCA", "=:,^"},
                             {"NVSHMEM_IB_ENABLE_IBGDA", ""},
                             {"NVSHMEM_USE_GDRCOPY", "1"},
                             {"LD_PRELOAD", " : "},
                             {"X_HOME", "/"}},
                            make_snapshot(2, {"mlx5_0"}, {"eth0"}));
    EXPECT_FALSE(loaded.summary.empty()) << id;
  }
}

}  // namespace
}  // namespace epkit::checks
