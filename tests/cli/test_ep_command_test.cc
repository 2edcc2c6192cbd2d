// `epkit test ep` without a usable GPU fails loudly like `epkit test`, and
// bad shapes are usage errors before any rank starts.
#include <gtest/gtest.h>

#include <string>

#include "support/cli_run.h"
#include "support/paths.h"

namespace epkit {
namespace {

using test::run_shell;

TEST(TestEpCommand, NoGpuIsUnavailableNamingTheCause) {
  auto r = run_shell(std::string("env CUDA_VISIBLE_DEVICES= ") + test::epkit_binary() +
                     " test ep --timeout 5");
  EXPECT_EQ(r.code, 12) << r.out;
  EXPECT_TRUE(r.out.find("CUDA") != std::string::npos || r.out.find("GPU") != std::string::npos ||
              r.out.find("driver") != std::string::npos)
      << r.out;
}

TEST(TestEpCommand, HiddenNotAMultipleOf128IsAUsageError) {
  auto r = run_shell(test::epkit_binary() + " test ep --hidden 1000 --nproc-per-node 1");
  EXPECT_EQ(r.code, 64) << r.out;
  EXPECT_NE(r.out.find("multiple of 128"), std::string::npos) << r.out;
}

// Exit 64 and the flag's own message: a valid run on a machine without a GPU
// exits non-zero too (12), so `code != 0` would pass with the check deleted.
TEST(TestEpCommand, BadFlagsAreUsageErrors) {
  struct Case {
    const char* args;
    const char* message;
  };
  const Case cases[] = {
      {"--tokens 0", "epkit: --tokens: Value 0 not in range 1 to 1048576\n"},
      {"--topk 0", "epkit: --topk: Value 0 not in range 1 to 64\n"},
      {"--no-such-flag", "epkit: The following argument was not expected: --no-such-flag\n"},
  };
  for (const auto& c : cases) {
    auto r = run_shell(std::string("env CUDA_VISIBLE_DEVICES= ") + test::epkit_binary() +
                       " test ep " + c.args);
    EXPECT_EQ(r.code, 64) << c.args << ": " << r.out;
    EXPECT_EQ(r.out, c.message) << c.args;
  }
}

TEST(TestEpCommand, UnknownModeIsAUsageError) {
  auto r = run_shell(std::string("env CUDA_VISIBLE_DEVICES= ") + test::epkit_binary() +
                     " test ep --mode fast --nproc-per-node 1");
  EXPECT_EQ(r.code, 64) << r.out;
  EXPECT_EQ(r.out, "epkit: --mode: fast not in {normal,low-latency}\n");
}

TEST(TestEpCommand, LowLatencyModeWithoutAGpuIsUnavailable) {
  auto r = run_shell(std::string("env CUDA_VISIBLE_DEVICES= ") + test::epkit_binary() +
                     " test ep --mode low-latency --timeout 5");
  EXPECT_EQ(r.code, 12) << r.out;
}

TEST(TestEpCommand, HelpListsTheFlags) {
  auto r = run_shell(test::epkit_binary() + " test ep --help");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* flag : {"--mode", "--tokens", "--hidden", "--topk", "--experts", "--sms",
                           "--seed", "--nproc-per-node", "--timeout", "--json"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
  auto parent = run_shell(test::epkit_binary() + " test --help");
  EXPECT_NE(parent.out.find("ep"), std::string::npos) << parent.out;
}

}  // namespace
}  // namespace epkit
