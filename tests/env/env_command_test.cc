// `epkit env` end to end: golden outputs for every example node in every
// format (EPKIT_UPDATE_GOLDEN=1 rewrites them), the sh output through
// shellcheck and back through --check, the k8s output through yamllint, and
// bad input.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli_run.h"
#include "support/golden.h"
#include "support/paths.h"
#include "support/temp_tree.h"

namespace epkit::cli {
namespace {

const char* const k_nodes[] = {"gke-a4", "dgx-h100"};
const char* const k_formats[] = {"sh", "json", "k8s", "mpirun", "dotenv"};

struct Empty {
  test::TempTree tree;
  std::string env;
  Empty() {
    tree.write("/empty.env", "");
    env = tree.path("/empty.env");
  }
};

test::CliRun generate(const std::string& node, const std::string& format, const Empty& empty,
                      std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"env",      "--sysroot", test::source_path("examples/" + node),
                                   "--format", format,      "--env-file",
                                   empty.env};
  args.insert(args.end(), extra.begin(), extra.end());
  return test::run_epkit(args);
}

bool have_tool(const char* tool) {
  return test::run_shell(std::string("command -v ") + tool + " >/dev/null").code == 0;
}

TEST(EnvCommand, GoldenOutputForEveryExampleNodeAndFormat) {
  Empty empty;
  for (const char* node : k_nodes) {
    for (const char* format : k_formats) {
      auto run = generate(node, format, empty);
      ASSERT_EQ(run.code, 0) << node << " " << format << ": " << run.err;
      // Only EPKIT_UPDATE_GOLDEN=1 rewrites, and a rewriting run fails.
      test::expect_golden(test::source_path(std::string("tests/env/golden/") + node + "." + format),
                          run.out, std::string(node) + "." + format);
    }
  }
}

TEST(EnvCommand, ShOutputPassesShellcheck) {
  if (!have_tool("shellcheck"))
    GTEST_SKIP() << "shellcheck not installed (apt-get install shellcheck)";
  Empty empty;
  for (const char* node : k_nodes) {
    for (std::vector<std::string> extra :
         {std::vector<std::string>{}, std::vector<std::string>{"--local-rank", "1"}}) {
      auto run = generate(node, "sh", empty, extra);
      ASSERT_EQ(run.code, 0);
      empty.tree.write("/out.sh", run.out);
      auto check = test::run_shell("shellcheck -s sh " + empty.tree.path("/out.sh"));
      EXPECT_EQ(check.code, 0) << node << "\n" << check.out;
    }
  }
}

// Source the sh output in a clean shell, dump its environment, and lint that:
// nothing the plan sets may be missing or different.
TEST(EnvCommand, ShOutputRoundTripsThroughEnvFile) {
  Empty empty;
  for (const char* node : k_nodes) {
    auto run = generate(node, "sh", empty);
    ASSERT_EQ(run.code, 0);
    empty.tree.write("/out.sh", run.out);
    std::string dumped = empty.tree.path("/dumped.env");
    auto shell = test::run_shell("env -i LOCAL_RANK=2 TORCH_NCCL_USE_COMM_NONBLOCKING=0 sh -c '. " +
                                 empty.tree.path("/out.sh") + " && env' > " + dumped);
    ASSERT_EQ(shell.code, 0) << shell.out;
    auto check = test::run_epkit({"env", "--check", "--json", "--sysroot",
                                  test::source_path(std::string("examples/") + node), "--env-file",
                                  dumped, "--local-rank", "2"});
    auto doc = nlohmann::json::parse(check.out);
    for (const auto& item : doc["diff"]) {
      std::string problem = item["problem"];
      EXPECT_TRUE(problem != "missing" && problem != "different" && problem != "must-unset")
          << node << ": " << item.dump();
    }
  }
}

TEST(EnvCommand, DotenvOutputRoundTrips) {
  Empty empty;
  auto run = generate("gke-a4", "dotenv", empty);
  ASSERT_EQ(run.code, 0);
  empty.tree.write("/out.env", run.out);
  auto check = test::run_epkit({"env", "--check", "--json", "--sysroot",
                                test::source_path("examples/gke-a4"), "--env-file",
                                empty.tree.path("/out.env")});
  auto doc = nlohmann::json::parse(check.out);
  EXPECT_TRUE(doc["diff"].empty()) << doc["diff"].dump(2);
}

TEST(EnvCommand, K8sOutputIsAValidContainerEnvList) {
  Empty empty;
  for (const char* node : k_nodes) {
    auto run = generate(node, "k8s", empty);
    ASSERT_EQ(run.code, 0);
    empty.tree.write("/env.yaml", run.out);
    // Read back as a k8s env: list, which is what --check takes.
    auto check = test::run_epkit({"env", "--check", "--json", "--sysroot",
                                  test::source_path(std::string("examples/") + node), "--env-file",
                                  empty.tree.path("/env.yaml")});
    auto doc = nlohmann::json::parse(check.out);
    for (const auto& item : doc["diff"]) {
      EXPECT_NE(item["problem"], "missing") << node << ": " << item.dump();
      EXPECT_NE(item["problem"], "different") << node << ": " << item.dump();
    }
    if (!have_tool("yamllint")) {
      std::cout
          << "[ SKIPPED ] yamllint not installed: k8s output checked by epkit's reader only\n";
      continue;
    }
    auto lint = test::run_shell(
        "yamllint -d '{extends: default, rules: {document-start: disable, line-length: disable, "
        "comments: {min-spaces-from-content: 1}}}' " +
        empty.tree.path("/env.yaml"));
    EXPECT_EQ(lint.code, 0) << node << "\n" << lint.out;
    auto shape = test::run_shell(
        "python3 -c 'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); "
        "assert list(d) == [\"env\"]; "
        "assert all(sorted(e) == [\"name\", \"value\"] and isinstance(e[\"value\"], str) "
        "for e in d[\"env\"]), d' " +
        empty.tree.path("/env.yaml"));
    EXPECT_EQ(shape.code, 0) << node << "\n" << shape.out;
  }
}

TEST(EnvCommand, CheckOfSeed000NamesItsMistakesAndFails) {
  auto run = test::run_epkit({"env", "--check", "--sysroot", test::source_path("examples/gke-a4"),
                              "--env-file", test::source_path("examples/env/gke-a4-seed000.env")});
  EXPECT_EQ(run.code, 2) << run.out;
  for (const char* text :
       {"must-unset  TORCH_NCCL_USE_COMM_NONBLOCKING=0",
        "fix: unset TORCH_NCCL_USE_COMM_NONBLOCKING", "NVSHMEM_IBGDA_NIC_HANDLER=cpu",
        "fix: export NVSHMEM_IBGDA_NIC_HANDLER=gpu",
        "misspelt    no library reads NVSHMEM_DISABLED_GDRCOPY",
        "fix: export NVSHMEM_DISABLE_GDRCOPY=1; unset NVSHMEM_DISABLED_GDRCOPY",
        "build-only  NVSHMEM_IBGDA_SUPPORT", "missing     DEEP_EP_DEVICE_TO_HCA_MAPPING",
        "fix: export NCCL_IB_GID_INDEX=3", "FAIL    env.paths", "FAIL    nccl.net-plugin",
        "NVSHMEM_HOME=/opt/deepep/nvshmem does not exist", "FAIL    nvshmem.ibgda"}) {
    EXPECT_NE(run.out.find(text), std::string::npos) << text << "\n" << run.out;
  }
  auto fixed = test::run_epkit({"env", "--check", "--sysroot", test::source_path("examples/gke-a4"),
                                "--env-file", test::source_path("examples/env/gke-a4-fixed.env")});
  EXPECT_EQ(fixed.code, 0) << fixed.out;
}

TEST(EnvCommand, BadInputIsAClearErrorAndExit64) {
  test::TempTree tree;
  tree.write("/binary.env", std::string("\x7f"
                                        "ELF\x02\x01\x01\0\0\0",
                                        10));
  tree.write("/a-file", "x");
  tree.mkdir("/no-sys");
  std::string node = test::source_path("examples/gke-a4");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  std::vector<Case> cases = {
      {{"env", "--check", "--sysroot", node, "--env-file", tree.path("/binary.env")}, "NUL byte"},
      {{"env", "--sysroot", node, "--env-file", tree.path("/binary.env")}, "NUL byte"},
      {{"env", "--format", "yaml", "--sysroot", node}, "unknown format 'yaml'"},
      {{"env", "--profile", "gke-a5", "--sysroot", node}, "unknown profile 'gke-a5'"},
      {{"env", "--sysroot", tree.path("/nowhere")}, "not a folder"},
      {{"env", "--sysroot", tree.path("/a-file")}, "not a folder"},
      {{"env", "--sysroot", tree.path("/no-sys")}, "not a node tree"},
      {{"env", "--sysroot", node, "--env-file", tree.path("/missing.env")}, "cannot open"},
      {{"env", "--sysroot", node, "--local-rank", "8"}, "--local-rank 8"},
  };
  for (const auto& c : cases) {
    auto run = test::run_epkit(c.args);
    EXPECT_EQ(run.code, 64) << c.args[2] << " " << run.out << run.err;
    EXPECT_NE(run.err.find(c.message), std::string::npos) << run.err;
    EXPECT_TRUE(run.out.empty()) << run.out;
  }
}

}  // namespace
}  // namespace epkit::cli
