#include <gtest/gtest.h>

#include <set>

#include "checks/check_fixture.h"
#include "env/known_vars.h"
#include "topo/probe.h"
#include "util/text.h"

namespace epkit::checks {
namespace {

using test::describe;
using test::mentions;
using test::run_check;
using test::TempTree;

TEST(KnownVars, EditDistance) {
  EXPECT_EQ(util::edit_distance("", ""), 0u);
  EXPECT_EQ(util::edit_distance("abc", ""), 3u);
  EXPECT_EQ(util::edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(util::edit_distance("NVSHMEM_DISABLED_GDRCOPY", "NVSHMEM_DISABLE_GDRCOPY"), 1u);
}

TEST(KnownVars, NearestNameStaysInItsFamily) {
  auto near = env::nearest_known("NVSHMEM_DISABLED_GDRCOPY");
  EXPECT_EQ(near.name, "NVSHMEM_DISABLE_GDRCOPY");
  EXPECT_EQ(near.distance, 1u);
  EXPECT_EQ(env::nearest_known("NCCL_SOCKET_IFNAM").name, "NCCL_SOCKET_IFNAME");
  EXPECT_TRUE(env::nearest_known("CUDA_HOME").name.empty());
}

TEST(KnownVars, WhoReads) {
  EXPECT_EQ(env::who_reads("NCCL_IB_HCA"), "NCCL");
  EXPECT_EQ(env::who_reads("NVSHMEM_IBGDA_NIC_HANDLER"), "NVSHMEM");
  EXPECT_TRUE(env::who_reads("NCCL_GIB_ANYTHING").has_value());
  EXPECT_TRUE(env::who_reads("NCCL_TUNER_CONFIG_PATH").has_value());
  EXPECT_TRUE(env::who_reads("NCCL_ASYNC_ERROR_HANDLING").has_value());
  EXPECT_TRUE(env::who_reads("NVSHMEM_USE_GDRCOPY").has_value());
  EXPECT_FALSE(env::who_reads("NVSHMEM_DISABLED_GDRCOPY").has_value());
  EXPECT_FALSE(env::who_reads("NCCL_IB_HCAS").has_value());
}

TEST(KnownVars, ListsHaveNoDuplicatesAndRightPrefixes) {
  std::set<std::string_view> seen;
  for (auto name : env::known_nccl_vars()) {
    EXPECT_TRUE(name.starts_with("NCCL_")) << name;
    EXPECT_TRUE(seen.insert(name).second) << name;
  }
  for (auto name : env::known_nvshmem_vars()) {
    EXPECT_TRUE(name.starts_with("NVSHMEM_")) << name;
    EXPECT_TRUE(seen.insert(name).second) << name;
  }
  for (const auto& other : env::known_other_vars()) EXPECT_TRUE(seen.insert(other.name).second);
}

TEST(EnvPaths, MissingHomesFailAsInTheGkeCase) {
  TempTree tree;
  tree.mkdir("/usr/local/cuda");
  auto out = run_check("env.paths", tree,
                       {{"GDRCOPY_HOME", "/opt/deepep/gdrcopy"},
                        {"NVSHMEM_HOME", "/opt/deepep/nvshmem"},
                        {"CUDA_HOME", "/usr/local/cuda"}});
  EXPECT_EQ(out.status, Status::fail) << describe(out);
  EXPECT_TRUE(mentions(out, "GDRCOPY_HOME=/opt/deepep/gdrcopy")) << describe(out);
  EXPECT_TRUE(mentions(out, "NVSHMEM_HOME=/opt/deepep/nvshmem")) << describe(out);
  EXPECT_FALSE(mentions(out, "CUDA_HOME")) << describe(out);
}

TEST(EnvPaths, ExistingPathsPass) {
  TempTree tree;
  tree.mkdir("/usr/local/nvidia/lib64");
  tree.mkdir("/usr/local/cuda");
  tree.write("/usr/local/nvidia/lib64/libnvshmem_host.so.3", "");
  auto out = run_check("env.paths", tree,
                       {{"NVSHMEM_HOME", "/usr/local/nvidia"},
                        {"CUDA_HOME", "/usr/local/cuda"},
                        {"LD_LIBRARY_PATH", "/usr/local/nvidia/lib64"},
                        {"LD_PRELOAD", "libnvshmem_host.so.3"},
                        {"JOB_NAME_HOME", "relative/not/a/path"}});
  EXPECT_EQ(out.status, Status::pass) << describe(out);
}

TEST(EnvPaths, NothingSetPasses) {
  TempTree tree;
  auto out = run_check("env.paths", tree, {});
  EXPECT_EQ(out.status, Status::pass) << describe(out);
}

TEST(EnvPaths, PreloadEntries) {
  TempTree tree;
  tree.write("/opt/lib/a.so", "");
  auto missing = run_check("env.paths", tree, {{"LD_PRELOAD", "/opt/lib/a.so /opt/lib/b.so"}});
  EXPECT_EQ(missing.status, Status::fail) << describe(missing);
  EXPECT_TRUE(mentions(missing, "/opt/lib/b.so"));
  EXPECT_FALSE(mentions(missing, "/opt/lib/a.so does not"));
  auto colon = run_check("env.paths", tree, {{"LD_PRELOAD", "/opt/lib/a.so:/opt/lib/a.so"}});
  EXPECT_EQ(colon.status, Status::pass) << describe(colon);
  auto bare = run_check("env.paths", tree, {{"LD_PRELOAD", "libnowhere.so.1"}});
  EXPECT_EQ(bare.status, Status::warn) << describe(bare);
}

TEST(EnvPaths, MissingListEntriesWarn) {
  TempTree tree;
  tree.mkdir("/usr/local/nvidia/lib64");
  auto out = run_check("env.paths", tree,
                       {{"LD_LIBRARY_PATH", "/usr/local/nvidia/lib64:/usr/local/gib/lib64"},
                        {"PYTHONPATH", "/opt/deepep/python"}});
  // (/usr/local/nvidia/lib64 exists here; the image-default allowance is not involved.)
  EXPECT_EQ(out.status, Status::warn) << describe(out);
  EXPECT_TRUE(mentions(out, "/usr/local/gib/lib64")) << describe(out);
  EXPECT_TRUE(mentions(out, "/opt/deepep/python")) << describe(out);
  EXPECT_FALSE(mentions(out, "entry /usr/local/nvidia/lib64")) << describe(out);
}

TEST(EnvPaths, CudaImageDefaultsAreOnlyNoted) {
  TempTree tree;
  auto out = run_check("env.paths", tree,
                       {{"LD_LIBRARY_PATH", "/usr/local/nvidia/lib:/usr/local/nvidia/lib64"}});
  EXPECT_EQ(out.status, Status::pass) << describe(out);
  EXPECT_TRUE(mentions(out, "image default")) << describe(out);
}

TEST(EnvUnknownVars, TypoIsFlaggedWithTheRightName) {
  TempTree tree;
  auto out = run_check("env.unknown-vars", tree,
                       {{"NVSHMEM_DISABLED_GDRCOPY", "1"}, {"NCCL_IB_HCA", "mlx5"}});
  EXPECT_EQ(out.status, Status::warn) << describe(out);
  EXPECT_TRUE(mentions(out, "NVSHMEM_DISABLED_GDRCOPY"));
  EXPECT_NE(out.fix.find("export NVSHMEM_DISABLE_GDRCOPY=1; unset NVSHMEM_DISABLED_GDRCOPY"),
            std::string::npos)
      << describe(out);
  EXPECT_FALSE(mentions(out, "NCCL_IB_HCA"));
}

TEST(EnvUnknownVars, KnownLibraryPluginAndToolNamesPass) {
  TempTree tree;
  auto out = run_check("env.unknown-vars", tree,
                       {{"NCCL_IB_HCA", "mlx5"},
                        {"NCCL_NET", "gIB"},
                        {"NCCL_TUNER_CONFIG_PATH", "/x"},
                        {"NCCL_GIB_FOO", "1"},
                        {"NCCL_ASYNC_ERROR_HANDLING", "1"},
                        {"NVSHMEM_IB_ENABLE_IBGDA", "1"},
                        {"NVSHMEM_USE_GDRCOPY", "1"},
                        {"NVSHMEM_HOME", "/usr/local/nvidia"},
                        {"NCCL_VERSION", "2.28.3-1"},
                        {"OTHER_THING", "x"}});
  EXPECT_EQ(out.status, Status::pass) << describe(out);
}

TEST(EnvUnknownVars, NcclTypo) {
  TempTree tree;
  auto out = run_check("env.unknown-vars", tree, {{"NCCL_SOCKET_IFNAM", "eth0"}});
  EXPECT_EQ(out.status, Status::warn);
  EXPECT_TRUE(mentions(out, "NCCL_SOCKET_IFNAME")) << describe(out);
  auto quoted = run_check("env.unknown-vars", tree, {{"NCCL_DEBUGG", "it's on"}});
  EXPECT_EQ(quoted.fix, "export NCCL_DEBUG='it'\\''s on'; unset NCCL_DEBUGG") << describe(quoted);
}

// Seed 000's RDMAV_DRIVERS named a folder that was not there; env.paths never
// looked at it.
TEST(EnvPaths, RdmavDriversIsCheckedAsAPath) {
  TempTree tree;
  tree.mkdir("/usr/lib/x86_64-linux-gnu/libibverbs");
  auto out =
      run_check("env.paths", tree, {{"RDMAV_DRIVERS", "/usr/local/nvidia/lib64/libibverbs"}});
  EXPECT_EQ(out.status, Status::warn) << describe(out);
  EXPECT_TRUE(mentions(out,
                       "RDMAV_DRIVERS entry /usr/local/nvidia/lib64/libibverbs does not "
                       "exist"))
      << describe(out);
  auto ibv = run_check("env.paths", tree, {{"IBV_DRIVERS", "mlx5:/opt/none/libmlx5.so"}});
  EXPECT_EQ(ibv.status, Status::warn) << describe(ibv);
  EXPECT_TRUE(mentions(ibv, "/opt/none/libmlx5.so")) << describe(ibv);
  EXPECT_FALSE(mentions(ibv, "entry mlx5 ")) << describe(ibv);  // a provider name, not a path
  auto present =
      run_check("env.paths", tree, {{"RDMAV_DRIVERS", "/usr/lib/x86_64-linux-gnu/libibverbs"}});
  EXPECT_EQ(present.status, Status::pass) << describe(present);
}

// Held-out case: an A3-Ultra-like node (8 H200, 8 RoCE rail NICs, two gVNICs)
// set up correctly: NCCL_IB_HCA unset (every RDMA device is a rail NIC, so
// NCCL's default is right) and NCCL_SOCKET_IFNAME naming one of the two
// usable interfaces. env.plan said FAIL.
TEST(EnvPlan, DeviationsNcclHandlesAreInfoNotFail) {
  TempTree tree("examples/gke-a4");
  for (const char* bdf : {"0000:13:00.0", "0000:14:00.0", "0000:33:00.0", "0000:34:00.0",
                          "0000:93:00.0", "0000:94:00.0", "0000:b3:00.0", "0000:b4:00.0"}) {
    tree.write(fmt::format("/sys/bus/pci/devices/{}/device", bdf), "0x2335\n");
    std::string info = fmt::format("/proc/driver/nvidia/gpus/{}/information", bdf);
    std::string text = host::Sysroot(tree.root()).read(info).value();
    text.replace(text.find("B200"), 4, "H200");
    tree.write(info, text);
  }
  std::map<std::string, std::string> job = {
      {"NCCL_SOCKET_IFNAME", "eth0"},
      {"NCCL_IB_GID_INDEX", "3"},
      {"NVSHMEM_IB_ENABLE_IBGDA", "1"},
      {"NVSHMEM_IBGDA_NIC_HANDLER", "gpu"},
      {"NVSHMEM_IB_GID_INDEX", "3"},
      {"NVSHMEM_ENABLE_NIC_PE_MAPPING", "1"},
      {"NVSHMEM_DISABLE_CUDA_VMM", "1"},
      {"DEEP_EP_DEVICE_TO_HCA_MAPPING",
       "0:mlx5_0:1,1:mlx5_1:1,2:mlx5_2:1,3:mlx5_3:1,4:mlx5_4:1,5:mlx5_5:1,6:mlx5_6:1,7:mlx5_7:1"}};
  host::Host host = tree.host(host::Env(job, "test"));
  topo::Snapshot snap = topo::probe(host);
  const Check* check = find_check("env.plan");
  ASSERT_NE(check, nullptr);
  auto out = check->run(Context{host, snap});
  EXPECT_EQ(out.status, Status::pass) << describe(out);
  EXPECT_TRUE(mentions(out, "gke-a3-ultra")) << describe(out);
  EXPECT_TRUE(mentions(out, "NCCL's default")) << describe(out);
  EXPECT_TRUE(mentions(out, "need only one routable interface")) << describe(out);

  // Where it matters it still fails: a NIC list that leaves rails out (the
  // one-NIC slowdown), or an interface name that selects nothing.
  for (auto [name, value] : std::map<std::string, std::string>{{"NCCL_IB_HCA", "=mlx5_0"}}) {
    auto bad = job;
    bad[name] = value;
    host::Host h = tree.host(host::Env(bad, "test"));
    EXPECT_EQ(check->run(Context{h, snap}).status, Status::fail) << name << "=" << value;
  }
  auto none = job;
  none["NCCL_SOCKET_IFNAME"] = "=eth42";
  host::Host h = tree.host(host::Env(none, "test"));
  auto warned = check->run(Context{h, snap});
  EXPECT_EQ(warned.status, Status::warn) << describe(warned);
}

}  // namespace
}  // namespace epkit::checks
