#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.h"
#include "support/cli_run.h"
#include "support/paths.h"
#include "support/temp_tree.h"

namespace epkit::cli {
namespace {

using test::CliRun;

CliRun run(std::vector<std::string> args) {
  args.insert(args.begin(), "logs");
  return test::run_epkit(std::move(args));
}

TEST(LogsCommand, CleanLogExitsZeroWithFoldedTable) {
  CliRun r = run({test::source_path("fixtures/logs/clean")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Ranks (8 on 2 hosts)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2.28.9+cuda13.0"), std::string::npos);
  EXPECT_NE(r.out.find("all 8"), std::string::npos);
  EXPECT_NE(r.out.find("8/8"), std::string::npos);
  EXPECT_NE(r.out.find("exit 0"), std::string::npos);
}

TEST(LogsCommand, ExitCodeFollowsWorstSeverity) {
  EXPECT_EQ(run({test::source_path("fixtures/logs/findings/nccl.warn.log")}).code, 0);
  EXPECT_EQ(run({test::source_path("fixtures/logs/findings/nccl.socket-fallback.log")}).code, 1);
  CliRun err = run({test::source_path("fixtures/logs/findings/nccl.net-plugin.log")});
  EXPECT_EQ(err.code, 2);
  EXPECT_NE(err.out.find("epkit doctor --only nccl.net-plugin"), std::string::npos) << err.out;
  EXPECT_NE(err.out.find("nccl.net-plugin.log:2:"), std::string::npos) << err.out;
}

TEST(LogsCommand, OutliersAreListed) {
  CliRun r = run({test::source_path("fixtures/logs/findings/nccl.version-mismatch.log")});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("2 of 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("node2:3301"), std::string::npos) << r.out;
}

TEST(LogsCommand, JsonIsValidForInvalidUtf8) {
  test::TempTree tree;
  tree.write("bad.log",
             "h:1:1 [0] NCCL WARN Failed to initialize any NET plugin \xC3\x28 \xFF\r\nno newline "
             "\xE2\x82");
  CliRun r = run({"--json", tree.path("bad.log")});
  EXPECT_EQ(r.code, 2);
  auto doc = nlohmann::json::parse(r.out);  // throws on invalid UTF-8
  EXPECT_EQ(doc["schema"], "epkit.logs/1");
  EXPECT_EQ(doc["exit_code"], 2);
  EXPECT_EQ(doc["lines"], 2);
  ASSERT_EQ(doc["findings"].size(), 1u);
  EXPECT_EQ(doc["findings"][0]["id"], "nccl.net-plugin");
  EXPECT_EQ(doc["findings"][0]["doctor_check"], "nccl.net-plugin");
  EXPECT_EQ(doc["findings"][0]["evidence"][0]["line"], 1);
}

TEST(LogsCommand, UnreadableInputAndBadFlagsExit64NamingTheCause) {
  CliRun missing = run({"/nonexistent/rank0.log"});
  EXPECT_EQ(missing.code, 64);
  EXPECT_NE(missing.err.find("/nonexistent/rank0.log"), std::string::npos) << missing.err;
  EXPECT_EQ(run({}).code, 64);
  EXPECT_EQ(run({"--slice", "(", test::source_path("fixtures/logs/clean")}).code, 64);
  EXPECT_EQ(run({"--no-such-flag", "x"}).code, 64);
}

TEST(LogsCommand, ListsRules) {
  CliRun r = run({"--list"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("nccl.init-incomplete"), std::string::npos);
  EXPECT_NE(r.out.find("[doctor: rdma.gid-index]"), std::string::npos);
}

}  // namespace
}  // namespace epkit::cli

namespace epkit::cli {
namespace {

TEST(LogsCommand, ExampleJobFoldsHostsAndNamesTheHungRank) {
  // 16 per-rank files, one of them gzip; node 2 lists a bond NIC, rank 13 hangs in init.
  CliRun r = run({test::source_path("fixtures/logs/example")});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("16 files"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gpu-node-02 (all 8)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("8 ranks, GPUs 0-7"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("15/16"), std::string::npos);
  EXPECT_NE(r.out.find("missing rank 13 (gpu-node-02:51239)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nccl.bond-in-hca"), std::string::npos);
  EXPECT_NE(r.out.find("nccl.gpu-node-02.51239.log:6:"), std::string::npos) << r.out;
}

TEST(LogsCommand, GlobAndSliceOptions) {
  CliRun r =
      run({"--json", "--slice", "iteration: ", test::source_path("fixtures/logs/clean/*.log")});
  EXPECT_EQ(r.code, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["files"].size(), 8u);
  EXPECT_EQ(doc["ranks"].size(), 8u);
  ASSERT_EQ(doc["slices"].size(), 1u);  // no marker in these logs: one slice holds everything
  EXPECT_EQ(doc["slices"][0]["collectives"]["AllReduce"], 24);
}

}  // namespace
}  // namespace epkit::cli

#include <sys/wait.h>

#include <cstdlib>

namespace epkit::cli {
namespace {

TEST(LogsCommand, ReadsStandardInput) {
  std::string cmd = test::epkit_binary() + " logs - < " +
                    test::source_path("fixtures/logs/findings/nccl.socket-fallback.log") +
                    " > /dev/null";
  int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  std::string clean = std::string("cat ") +
                      test::source_path("fixtures/logs/clean/nccl.node1.12340.log") + " | " +
                      test::epkit_binary() + " logs - > /dev/null";
  status = std::system(clean.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace epkit::cli

namespace epkit::cli {
namespace {

TEST(LogsCommandHardening, DevZeroIsRefusedAtOnce) {
  CliRun r = test::run_epkit({"logs", "/dev/zero"});
  EXPECT_EQ(r.code, 64);
  EXPECT_NE(r.err.find("/dev/zero: is a character device, not a log file"), std::string::npos)
      << r.err;
}

TEST(LogsCommandHardening, SliceDotStarOnALongLine) {
  test::TempTree tree;
  tree.write("train.log", "step " + std::string(35000, 'x') + " iteration 1 loss 2.5\n" +
                              "h:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1\n");
  CliRun r = test::run_epkit({"logs", "--slice", "iteration.*loss", tree.path("train.log")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Slices (2)"), std::string::npos) << r.out;
}

TEST(LogsCommandCatalogue, RulesListTheFamiliesAndTheCoverage) {
  CliRun r = test::run_epkit({"logs", "--rules"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("nccl.ib-async-event"), std::string::npos);
  EXPECT_NE(r.out.find("nvshmem.transport-map"), std::string::npos);
  EXPECT_NE(r.out.find("deepep.timeout"), std::string::npos);
  EXPECT_NE(r.out.find("[doctor: rdma.port-errors]"), std::string::npos);
  EXPECT_NE(r.out.find("1521 of 1521 recognisable"), std::string::npos) << r.out;
  // The versions come from the mined data (NCCL 2.12-2.28, NVSHMEM 3.0-3.5).
  EXPECT_NE(r.out.find("mined from NCCL 2.12-2.28, NVSHMEM 3.0-3.5 and DeepEP V1/V2"),
            std::string::npos)
      << r.out;
}

TEST(LogsCommandCatalogue, FamilyFindingShowsWhatToLookFor) {
  test::TempTree tree;
  tree.write("a.log", "node7:1:2 [3] NCCL WARN NET/IB : mlx5_3:1 Got async event : port error\n");
  CliRun r = test::run_epkit({"logs", tree.path("a.log")});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("ERROR nccl.ib-async-event"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("detail NET/IB : mlx5_3:1 Got async event : port error"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("look for"), std::string::npos);
  EXPECT_NE(r.out.find("epkit doctor --only rdma.port-errors"), std::string::npos);
  CliRun j = test::run_epkit({"logs", "--json", tree.path("a.log")});
  auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["findings"][0]["id"], "nccl.ib-async-event");
  EXPECT_TRUE(doc["findings"][0]["look_for"].is_string());
}

}  // namespace
}  // namespace epkit::cli
