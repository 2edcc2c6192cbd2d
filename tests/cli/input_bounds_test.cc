// Bounded, validated command-line input: numbers that are no numbers, flags
// that disagree, and failures that must still answer in the format asked.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.h"
#include "support/cli_run.h"
#include "support/paths.h"
#include "support/temp_tree.h"

namespace epkit::cli {
namespace {

using test::run_epkit;
using test::run_shell;

// `--timeout NaN` passed CLI::Range (NaN compares false both ways).
TEST(InputBounds, TimeoutsMustBeFiniteAndInRange) {
  for (const char* value : {"NaN", "nan", "inf", "-inf", "1e300", "1e10", "0", "-1", "0x1p2000"}) {
    for (std::vector<std::string> args :
         {std::vector<std::string>{"test", "--timeout", value},
          std::vector<std::string>{"test", "ep", "--timeout", value},
          std::vector<std::string>{"bench", "nccl", "all_reduce", "--timeout", value},
          std::vector<std::string>{"bench", "ep", "--timeout", value}}) {
      auto r = run_epkit(args);
      EXPECT_EQ(r.code, k_exit_usage) << args[0] << " " << value << ": " << r.err;
      EXPECT_NE(r.err.find("--timeout"), std::string::npos) << r.err;
    }
  }
  auto busbw = run_epkit({"bench", "nccl", "all_reduce", "--min-busbw", "nan"});
  EXPECT_EQ(busbw.code, k_exit_usage) << busbw.err;
}

// `env --local-rank -1` was taken as "no rank given".
TEST(InputBounds, NegativeLocalRankIsRefused) {
  auto r =
      run_epkit({"env", "--sysroot", test::source_path("examples/gke-a4"), "--local-rank", "-1"});
  EXPECT_EQ(r.code, k_exit_usage);
  EXPECT_NE(r.err.find("--local-rank -1"), std::string::npos) << r.err;
}

// --json with --format: doctor refused some pairs, env let --json win.
TEST(InputBounds, JsonAndFormatFollowOneRuleInEveryCommand) {
  std::string node = test::source_path("examples/gke-a4");
  test::TempTree tree;
  tree.write("/empty.env", "");
  std::string env = tree.path("/empty.env");
  for (std::vector<std::string> args :
       {std::vector<std::string>{"doctor", "--json", "--format", "prometheus"},
        std::vector<std::string>{"doctor", "--json", "--format", "text"},
        std::vector<std::string>{"env", "--json", "--format", "sh"},
        std::vector<std::string>{"env", "--json", "--format", "k8s"},
        std::vector<std::string>{"env", "--check", "--json", "--format", "sh"}}) {
    args.insert(args.end(), {"--sysroot", node, "--env-file", env});
    auto r = run_epkit(args);
    EXPECT_EQ(r.code, k_exit_usage) << args[0] << " " << args[2] << " " << args[3];
    EXPECT_NE(r.err.find("--json and --format"), std::string::npos) << r.err;
  }
  for (std::vector<std::string> args :
       {std::vector<std::string>{"doctor", "--json"},
        std::vector<std::string>{"doctor", "--format", "json"},
        std::vector<std::string>{"doctor", "--json", "--format", "json"},
        std::vector<std::string>{"env", "--json"},
        std::vector<std::string>{"env", "--format", "json"},
        std::vector<std::string>{"env", "--check", "--format", "json"}}) {
    args.insert(args.end(), {"--sysroot", node, "--env-file", env});
    auto r = run_epkit(args);
    EXPECT_LT(r.code, k_exit_usage) << args[0] << ": " << r.err;
    EXPECT_FALSE(nlohmann::json::parse(r.out, nullptr, false).is_discarded())
        << args[0] << " " << args[1] << "\n"
        << r.out;
  }
}

// `test --json` and `bench --json` printed no JSON when the run failed.
TEST(InputBounds, GpuCommandsPrintJsonAlsoOnFailure) {
  for (const char* command :
       {"test --json --timeout 5", "test ep --json --timeout 5",
        "bench nccl all_reduce --json --timeout 5", "bench ep --json --timeout 5",
        "bench p2p --json", "bench nccl all_reduce -b 1G -e 16M --json",
        "bench ep --hidden 200 --json", "test ep --hidden 200 --json"}) {
    // Standard output alone (run_shell joins standard error to it).
    auto r = run_shell(std::string("(env CUDA_VISIBLE_DEVICES= ") + test::epkit_binary() + " " +
                       command + " 2>/dev/null)");
    EXPECT_NE(r.code, 0) << command;
    auto doc = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << command << "\n" << r.out;
    EXPECT_EQ(doc.value("ok", true), false) << r.out;
    EXPECT_EQ(doc.value("exit_code", 0), r.code) << r.out;
    EXPECT_FALSE(doc.value("error", std::string()).empty()) << r.out;
  }
}

// --env-file DIR was an empty environment; /dev/zero exhausted memory.
TEST(InputBounds, EnvFileMustBeARegularFile) {
  test::TempTree tree;
  tree.mkdir("/dir.env");
  std::string node = test::source_path("examples/gke-a4");
  for (const std::string& file : {tree.path("/dir.env"), std::string("/dev/zero")}) {
    for (std::vector<std::string> args :
         {std::vector<std::string>{"doctor", "--sysroot", node, "--env-file", file},
          std::vector<std::string>{"env", "--check", "--sysroot", node, "--env-file", file},
          std::vector<std::string>{"env", "--sysroot", node, "--env-file", file}}) {
      auto r = run_epkit(args);
      EXPECT_EQ(r.code, k_exit_usage) << args[0] << " " << file;
      EXPECT_NE(r.err.find(file), std::string::npos) << r.err;
    }
  }
}

// A 1 MiB variable name took seconds per candidate in the did-you-mean
// search; an LD_LIBRARY_PATH of 200,000 entries was stat()ed entry by entry
// for minutes. Passive commands must stay well under 10 s.
TEST(InputBounds, HugeEnvValuesKeepPassiveCommandsFast) {
  test::TempTree tree;
  std::string text = "NCCL_" + std::string(1 << 20, 'A') + "=1\nLD_LIBRARY_PATH=";
  for (int i = 0; i < 200000; ++i) text += "/x" + std::to_string(i) + ":";
  text += "\nLD_PRELOAD=" + std::string(1 << 19, ' ') + "\n";
  tree.write("/huge.env", text);
  std::string node = test::source_path("examples/gke-a4");
  for (std::vector<std::string> args :
       {std::vector<std::string>{"doctor", "--sysroot", node, "--env-file", tree.path("/huge.env")},
        std::vector<std::string>{"env", "--check", "--sysroot", node, "--env-file",
                                 tree.path("/huge.env")}}) {
    auto begin = std::chrono::steady_clock::now();
    auto r = run_epkit(args);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    EXPECT_LT(r.code, k_exit_usage) << args[0] << ": " << r.err;
    EXPECT_LT(s, 5.0) << args[0];
  }
}

// Quotes were kept: NCCL_SOCKET_IFNAME="eth0,eth1" gave a false FAIL.
TEST(InputBounds, QuotedEnvFileValuesAreReadAsTheShellReadsThem) {
  test::TempTree tree;
  std::string fixed = test::source_path("examples/env/gke-a4-fixed.env");
  auto text = run_shell("sed -e 's/^\\([A-Z_]*\\)=\\(.*\\)$/export \\1=\"\\2\"/' " + fixed);
  ASSERT_EQ(text.code, 0);
  tree.write("/quoted.env", text.out);
  auto r = run_epkit({"env", "--check", "--sysroot", test::source_path("examples/gke-a4"),
                      "--env-file", tree.path("/quoted.env")});
  EXPECT_EQ(r.code, 0) << text.out << r.out << r.err;
}

}  // namespace
}  // namespace epkit::cli
