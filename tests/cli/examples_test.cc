// The bundled example nodes and env files tell the seeds' story; these tests
// keep what the README shows true.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.h"
#include "support/cli_run.h"
#include "support/paths.h"
#include "support/temp_tree.h"

namespace epkit::cli {
namespace {

struct Doctor {
  int code = -1;
  std::map<std::string, std::string> status;  // id -> status
};

Doctor doctor(const std::string& node, const std::string& env_file) {
  std::string sysroot = test::source_path(node);
  std::string env = test::source_path(env_file);
  std::vector<const char*> argv = {"epkit",         "doctor",     "--json",   "--sysroot",
                                   sysroot.c_str(), "--env-file", env.c_str()};
  std::ostringstream out;
  std::ostringstream err;
  Io io{out, err, false};
  Doctor d;
  d.code = run_cli(static_cast<int>(argv.size()), argv.data(), io);
  auto doc = nlohmann::json::parse(out.str());
  for (const auto& check : doc["checks"]) d.status[check["id"]] = check["status"];
  return d;
}

TEST(Examples, GkeA4WithTheFixedEnvironmentIsHealthy) {
  auto d = doctor("examples/gke-a4", "examples/env/gke-a4-fixed.env");
  EXPECT_EQ(d.code, 0);
  for (const auto& [id, status] : d.status) {
    EXPECT_TRUE(status == "pass" || status == "skip") << id << " " << status;
  }
  EXPECT_EQ(d.status["gpu.nic-affinity"], "pass");
  EXPECT_EQ(d.status["rdma.gid-index"], "pass");
}

TEST(Examples, GkeA4WithSeed000EnvironmentShowsTheSeedsFaults) {
  auto d = doctor("examples/gke-a4", "examples/env/gke-a4-seed000.env");
  EXPECT_EQ(d.code, 2);
  EXPECT_EQ(d.status["nccl.net-plugin"], "fail");   // gIB absent, tuner config, NONBLOCKING
  EXPECT_EQ(d.status["env.paths"], "fail");         // NVSHMEM_HOME, GDRCOPY_HOME
  EXPECT_EQ(d.status["env.unknown-vars"], "warn");  // NVSHMEM_DISABLED_GDRCOPY
  EXPECT_EQ(d.status["nvshmem.ibgda"], "fail");     // CPU NIC handler on GCP
  EXPECT_EQ(d.status["gpu.nic-affinity"], "warn");  // every GPU on mlx5_0
  EXPECT_EQ(d.status["rdma.gid-index"], "warn");    // NVSHMEM on GID 0
}

TEST(Examples, DgxH100IsHealthyWithAnEmptyEnvironment) {
  test::TempTree tree;
  tree.write("/empty.env", "");
  std::string env = tree.path("/empty.env");
  std::string sysroot = test::source_path("examples/dgx-h100");
  std::vector<const char*> argv = {"epkit",         "doctor",     "--sysroot",
                                   sysroot.c_str(), "--env-file", env.c_str()};
  std::ostringstream out;
  std::ostringstream err;
  Io io{out, err, false};
  int code = run_cli(static_cast<int>(argv.size()), argv.data(), io);
  EXPECT_LE(code, 1) << out.str();  // at most WARN (no mapping configured)
  EXPECT_EQ(out.str().find("FAIL "), std::string::npos) << out.str();
}

}  // namespace
}  // namespace epkit::cli

namespace epkit::cli {
namespace {

// Text output shows eight evidence rows per finding; --verbose shows all.
TEST(Examples, DoctorTextCapsEvidenceRowsUnlessVerbose) {
  test::TempTree tree;
  tree.write("/bad.env", "NCCL_IB_GID_INDEX=0\nNVSHMEM_IB_GID_INDEX=1\n");
  std::vector<std::string> args = {
      "doctor",        "--sysroot",           test::source_path("examples/gke-a4"),
      "--env-file",    tree.path("/bad.env"), "--only",
      "rdma.gid-index"};
  auto brief = test::run_epkit(args);
  EXPECT_EQ(brief.code, 2);
  EXPECT_NE(brief.out.find("... 2 more (--verbose or --json)"), std::string::npos) << brief.out;
  args.push_back("--verbose");
  auto full = test::run_epkit(args);
  EXPECT_EQ(full.out.find("more (--verbose"), std::string::npos);
  EXPECT_NE(full.out.find("NVSHMEM_IB_GID_INDEX = 1"), std::string::npos) << full.out;
}

}  // namespace
}  // namespace epkit::cli
