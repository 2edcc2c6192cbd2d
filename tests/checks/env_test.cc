#include <gtest/gtest.h>

#include <set>

#include "checks/check_fixture.h"
#include "checks/known_vars.h"
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
  auto near = nearest_known("NVSHMEM_DISABLED_GDRCOPY");
  EXPECT_EQ(near.name, "NVSHMEM_DISABLE_GDRCOPY");
  EXPECT_EQ(near.distance, 1u);
  EXPECT_EQ(nearest_known("NCCL_SOCKET_IFNAM").name, "NCCL_SOCKET_IFNAME");
  EXPECT_TRUE(nearest_known("CUDA_HOME").name.empty());
}

TEST(KnownVars, WhoReads) {
  EXPECT_EQ(who_reads("NCCL_IB_HCA"), "NCCL");
  EXPECT_EQ(who_reads("NVSHMEM_IBGDA_NIC_HANDLER"), "NVSHMEM");
  EXPECT_TRUE(who_reads("NCCL_GIB_ANYTHING").has_value());
  EXPECT_TRUE(who_reads("NCCL_TUNER_CONFIG_PATH").has_value());
  EXPECT_TRUE(who_reads("NCCL_ASYNC_ERROR_HANDLING").has_value());
  EXPECT_TRUE(who_reads("NVSHMEM_USE_GDRCOPY").has_value());
  EXPECT_FALSE(who_reads("NVSHMEM_DISABLED_GDRCOPY").has_value());
  EXPECT_FALSE(who_reads("NCCL_IB_HCAS").has_value());
}

TEST(KnownVars, ListsHaveNoDuplicatesAndRightPrefixes) {
  std::set<std::string_view> seen;
  for (auto name : known_nccl_vars()) {
    EXPECT_TRUE(name.starts_with("NCCL_")) << name;
    EXPECT_TRUE(seen.insert(name).second) << name;
  }
  for (auto name : known_nvshmem_vars()) {
    EXPECT_TRUE(name.starts_with("NVSHMEM_")) << name;
    EXPECT_TRUE(seen.insert(name).second) << name;
  }
  for (const auto& other : known_other_vars()) EXPECT_TRUE(seen.insert(other.name).second);
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

}  // namespace
}  // namespace epkit::checks
