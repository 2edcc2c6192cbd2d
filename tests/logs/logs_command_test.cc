#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "support/temp_tree.h"

namespace epkit::cli {
namespace {

struct CliRun {
  int code;
  std::string out, err;
};

CliRun run(std::vector<std::string> args) {
  args.insert(args.begin(), {"epkit", "logs"});
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  Io io{out, err, false};
  int code = run_cli(static_cast<int>(argv.size()), argv.data(), io);
  return {code, out.str(), err.str()};
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
  tree.write("bad.log", "h:1:1 [0] NCCL WARN Failed to initialize any NET plugin \xC3\x28 \xFF\r\nno newline \xE2\x82");
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
