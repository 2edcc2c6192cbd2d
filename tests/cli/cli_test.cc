#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.h"
#include "support/cli_run.h"
#include "support/temp_tree.h"

namespace epkit::cli {
namespace {

using test::CliRun;

CliRun run(std::vector<std::string> args) {
  return test::run_epkit(std::move(args));
}

TEST(Cli, VersionAndHelp) {
  auto v = run({"--version"});
  EXPECT_EQ(v.code, 0);
  EXPECT_NE(v.out.find("epkit "), std::string::npos);
  auto h = run({"--help"});
  EXPECT_EQ(h.code, 0);
  EXPECT_NE(h.out.find("doctor"), std::string::npos);
  auto sub = run({"doctor", "--help"});
  EXPECT_EQ(sub.code, 0);
  EXPECT_NE(sub.out.find("--sysroot"), std::string::npos);
}

TEST(Cli, UnknownCommandSuggestsTheNearest) {
  auto r = run({"docter"});
  EXPECT_EQ(r.code, k_exit_usage);
  EXPECT_NE(r.err.find("Did you mean 'doctor'"), std::string::npos) << r.err;
}

TEST(Cli, BadFlagIsUsageError) {
  auto r = run({"doctor", "--no-such-flag"});
  EXPECT_EQ(r.code, k_exit_usage);
  EXPECT_FALSE(r.err.empty());
}

TEST(Cli, DoctorRejectsUnknownCheckIds) {
  auto r = run({"doctor", "--only", "no.such-check"});
  EXPECT_EQ(r.code, k_exit_usage);
  EXPECT_NE(r.err.find("no.such-check"), std::string::npos);
}

TEST(Cli, DoctorNamesAMissingEnvFileOrSysroot) {
  auto env = run({"doctor", "--env-file", "/nonexistent/job.env"});
  EXPECT_EQ(env.code, k_exit_usage);
  EXPECT_NE(env.err.find("/nonexistent/job.env"), std::string::npos);
  auto root = run({"doctor", "--sysroot", "/nonexistent/node"});
  EXPECT_EQ(root.code, k_exit_usage);
  EXPECT_NE(root.err.find("/nonexistent/node"), std::string::npos);
}

TEST(Cli, DoctorOnANodeWithoutGpusSaysSoAndPasses) {
  test::TempTree tree;
  tree.write("/etc/hostname", "empty-node\n");
  tree.write("/tmp/empty.env", "PATH=/usr/bin\n");
  auto r = run({"doctor", "--sysroot", tree.root(), "--env-file", tree.path("/tmp/empty.env")});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("No NVIDIA GPU and no RDMA device"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("examples/"), std::string::npos);
}

TEST(Cli, DoctorJsonIsValidAndCarriesTheExitCode) {
  test::TempTree tree;
  tree.write("/tmp/empty.env", "PATH=/usr/bin\n");
  auto r = run(
      {"doctor", "--json", "--sysroot", tree.root(), "--env-file", tree.path("/tmp/empty.env")});
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["schema"], "epkit.doctor/1");
  EXPECT_EQ(doc["exit_code"].get<int>(), r.code);
  EXPECT_TRUE(doc["checks"].is_array());
}

}  // namespace
}  // namespace epkit::cli
