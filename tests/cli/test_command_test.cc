// `epkit test` without a usable GPU must fail loudly, and the binary must not
// need libnccl or libcuda to start (doctor runs on broken nodes).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "host/elf.h"
#include "host/sysroot.h"
#include "support/cli_run.h"
#include "support/paths.h"
#include "support/temp_tree.h"

namespace epkit {
namespace {

using test::run_shell;

TEST(TestCommand, BinaryNeedsNeitherNcclNorLibcuda) {
  // The debug build is larger than the ELF reader loads: read a stripped copy.
  test::TempTree tree;
  std::string copy = tree.path("/epkit");
  ASSERT_EQ(run_shell("strip -o " + copy + " " + test::epkit_binary()).code, 0);
  auto elf = host::read_elf(host::Sysroot("/"), copy);
  ASSERT_TRUE(elf.ok()) << elf.error().message;
  for (const auto& lib : elf->needed) {
    EXPECT_EQ(lib.find("libnccl"), std::string::npos) << lib;
    EXPECT_EQ(lib.find("libcuda"), std::string::npos) << lib;
    EXPECT_EQ(lib.find("libcudart"), std::string::npos) << lib;
  }
}

// No GPU visible (CUDA_VISIBLE_DEVICES empty hides them on a GPU machine; CI
// has none): a named cause and exit 12, never a pass.
TEST(TestCommand, NoGpuIsAFailureNamingTheCause) {
  auto r =
      run_shell(fmt::format("env CUDA_VISIBLE_DEVICES= {} test --timeout 5", test::epkit_binary()));
  EXPECT_EQ(r.code, 12) << r.out;
  EXPECT_NE(r.out.find("FAIL: "), std::string::npos) << r.out;
  EXPECT_TRUE(r.out.find("CUDA") != std::string::npos || r.out.find("driver") != std::string::npos)
      << r.out;
}

TEST(TestCommand, BadTimeoutIsAUsageError) {
  auto r = run_shell(fmt::format("{} test --timeout -1", test::epkit_binary()));
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.code, 12) << r.out;
}

// A sweep that cannot be (-b above -e) is the command's usage error, said
// once and without a rank prefix, before any rank starts.
TEST(TestCommand, BenchSweepUsageErrorIsSaidOnce) {
  auto r = run_shell(fmt::format("{} bench nccl all_reduce -b 1G -e 16M", test::epkit_binary()));
  EXPECT_EQ(r.code, 64) << r.out;
  EXPECT_NE(r.out.find("epkit bench nccl: -b 1073741824 is larger than -e 16777216"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("]"), std::string::npos) << r.out;  // no "[host:rank]"
}

}  // namespace
}  // namespace epkit
