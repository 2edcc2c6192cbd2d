// `epkit bench ep` on a machine without GPUs: flags are checked before any
// rank starts (exit 64 naming the flag), and the run itself fails with exit
// 12, never a pass.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "support/cli_run.h"
#include "support/paths.h"
#include "support/temp_tree.h"

namespace epkit::cli {
namespace {

using test::CliRun;

CliRun run(std::vector<std::string> args) {
  args.insert(args.begin(), {"bench", "ep"});
  return test::run_epkit(std::move(args));
}

// The real binary with every GPU hidden, as tests/cli/test_command_test.cc
// runs `epkit test`: in-process, a GPU machine would start ranks.
CliRun shell_no_gpu(const std::string& args) {
  return test::run_shell(
      fmt::format("env CUDA_VISIBLE_DEVICES= {} bench ep {}", test::epkit_binary(), args));
}

TEST(BenchEpCommand, HelpListsTheSweepAndDumpFlags) {
  auto r = run({"--help"});
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* flag :
       {"--tokens", "--hidden", "--topk", "--experts", "--sms", "--chunks", "--warmup", "--iters",
        "--seed", "--dump", "--json", "--timeout", "--nproc-per-node", "--mode"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag << "\n" << r.out;
  }
}

TEST(BenchEpCommand, BadShapesAndConfigsAreUsageErrors) {
  struct Case {
    std::vector<std::string> args;
    const char* names;
  };
  const Case cases[] = {
      {{"--hidden", "7000"}, "multiple of 128"},
      {{"--topk", "9", "--experts", "8"}, "--topk 9"},
      {{"--chunks", "1,3"}, "--chunks 3"},
      {{"--sms", "0"}, "--sms 0"},
  };
  for (const auto& c : cases) {
    auto r = run(c.args);
    EXPECT_EQ(r.code, 64) << c.names << ": " << r.out << r.err;
    EXPECT_NE(r.err.find(c.names), std::string::npos) << r.err;
  }
  // CLI11's own checks: not a number, out of range. Exit 64 and the message,
  // not just `code != 0`: a valid run without a GPU exits 12.
  auto r = run({"--sms", "24,x"});
  EXPECT_EQ(r.code, 64) << r.out << r.err;
  EXPECT_NE(r.err.find("Could not convert: --sms = 24,x"), std::string::npos) << r.err;
  r = run({"--iters", "0"});
  EXPECT_EQ(r.code, 64) << r.out << r.err;
  EXPECT_NE(r.err.find("--iters: Value 0 not in range 1 to 1000000"), std::string::npos) << r.err;
}

TEST(BenchEpCommand, LowLatencyModeTakesDeepEpsSizesAndOneSmCount) {
  auto mode = run({"--mode", "fast"});
  EXPECT_EQ(mode.code, 64) << mode.out << mode.err;
  EXPECT_NE(mode.err.find("--mode: fast not in {normal,low-latency}"), std::string::npos)
      << mode.err;
  // The default experts of this mode are test_low_latency.py's 288.
  auto r = run({"--mode", "low-latency", "--topk", "300"});
  EXPECT_EQ(r.code, 64) << r.out << r.err;
  EXPECT_NE(r.err.find("--topk 300 is more than --experts 288"), std::string::npos) << r.err;
  // The user's value wins; normal mode keeps 256.
  r = run({"--mode", "low-latency", "--topk", "300", "--experts", "299"});
  EXPECT_NE(r.err.find("--experts 299"), std::string::npos) << r.err;
  r = run({"--topk", "300"});
  EXPECT_NE(r.err.find("--experts 256"), std::string::npos) << r.err;
  r = run({"--mode", "low-latency", "--sms", "24,12"});
  EXPECT_EQ(r.code, 64);
  EXPECT_NE(r.err.find("one --sms value"), std::string::npos) << r.err;
  r = run({"--mode", "low-latency", "--dump", "x"});
  EXPECT_EQ(r.code, 64);
  EXPECT_NE(r.err.find("--dump"), std::string::npos) << r.err;
  // Valid flags and no GPU: exit 12, never a pass.
  EXPECT_EQ(shell_no_gpu("--mode low-latency --timeout 5").code, 12);
  EXPECT_EQ(
      shell_no_gpu("--mode low-latency --network-leg emulated --nic-gbps 25 --timeout 5").code, 12);
}

// The network leg is the low-latency mode's across nodes (normal mode's
// internode runs are `epkit test ep`'s); a leg NCCL has no name for is refused.
TEST(BenchEpCommand, NetworkLegIsForTheLowLatencyMode) {
  auto r = run({"--network-leg", "emulated"});
  EXPECT_EQ(r.code, 64) << r.out << r.err;
  EXPECT_NE(r.err.find("--network-leg is for --mode low-latency"), std::string::npos) << r.err;
  r = run({"--mode", "low-latency", "--network-leg", "rdma"});
  EXPECT_EQ(r.code, 64) << r.out << r.err;
  EXPECT_NE(r.err.find("--network-leg: rdma not in {nccl,emulated}"), std::string::npos) << r.err;
  r = run({"--mode", "low-latency", "--nic-gbps", "0"});
  EXPECT_EQ(r.code, 64) << r.out << r.err;
}

// The folders were made before the GPU check: a run that could not start
// left a/b/c behind. Now the path is only checked; the ranks make it.
TEST(BenchEpCommand, DumpFolderIsCheckedButNotMadeBeforeTheRunStarts) {
  test::TempTree tree;
  std::string dir = tree.path("/out/ep");
  // No GPU: the run fails with exit 12 naming the cause, and leaves nothing.
  auto r = shell_no_gpu("--dump " + dir + " --timeout 5");
  EXPECT_EQ(r.code, 12) << r.out;
  EXPECT_FALSE(std::filesystem::exists(tree.path("/out"))) << r.out;
  tree.write("/file", "x");
  auto bad = run({"--dump", tree.path("/file/sub")});
  EXPECT_EQ(bad.code, 64) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("--dump"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("is not a folder"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace epkit::cli
