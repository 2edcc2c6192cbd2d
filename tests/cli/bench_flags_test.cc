// Every `epkit bench` subcommand spells sizes and iterations as nccl-tests
// does (-b/-e/-f, -w, -n); the older long forms stay as aliases. `bench p2p
// -b` used to be the one size per copy, and `bench ep` took only
// --warmup/--iters.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/cli_run.h"

namespace epkit::cli {
namespace {

test::CliRun bench(std::vector<std::string> args) {
  args.insert(args.begin(), "bench");
  return test::run_epkit(std::move(args));
}

TEST(BenchFlags, EverySubcommandTakesNcclTestsIterationFlags) {
  for (const char* sub : {"nccl", "p2p", "ep"}) {
    auto r = bench({sub, "--help"});
    EXPECT_EQ(r.code, 0) << sub << ": " << r.err;
    for (const char* flag : {"-w,", "-n,", "--warmup_iters", "--warmup", "--iters"}) {
      EXPECT_NE(r.out.find(flag), std::string::npos) << sub << " " << flag << "\n" << r.out;
    }
  }
  for (const char* sub : {"nccl", "p2p"}) {
    auto r = bench({sub, "--help"});
    for (const char* flag : {"-b,", "-e,", "-f,", "--minbytes", "--maxbytes", "--stepfactor"}) {
      EXPECT_NE(r.out.find(flag), std::string::npos) << sub << " " << flag << "\n" << r.out;
    }
  }
}

TEST(BenchFlags, EpShortAndLongFormsAreOneOption) {
  // Checked before any rank starts: the range error names the option.
  for (const auto& args : {std::vector<std::string>{"ep", "-n", "0"},
                           std::vector<std::string>{"ep", "--iters", "0"}}) {
    auto r = bench(args);
    EXPECT_EQ(r.code, 64) << r.out << r.err;
    EXPECT_NE(r.err.find("--iters: Value 0 not in range"), std::string::npos) << r.err;
  }
  for (const auto& args : {std::vector<std::string>{"ep", "-w", "-1"},
                           std::vector<std::string>{"ep", "--warmup", "-1"}}) {
    auto r = bench(args);
    EXPECT_EQ(r.code, 64) << r.out << r.err;
    EXPECT_NE(r.err.find("Value -1 not in range"), std::string::npos) << r.err;
  }
  // Both spellings at once is the same option given twice.
  auto r = bench({"ep", "-n", "5", "--iters", "6"});
  EXPECT_EQ(r.code, 64) << r.out << r.err;
}

TEST(BenchFlags, P2pSizesAreASweepLikeNcclTests) {
  // -b is the smallest size now; alone it is the one size, as before.
  auto r = bench({"p2p", "-b", "8"});
  EXPECT_EQ(r.code, 64) << r.out << r.err;
  EXPECT_NE(r.err.find("-b must be at least 16 bytes"), std::string::npos) << r.err;
  r = bench({"p2p", "--bytes", "8"});
  EXPECT_EQ(r.code, 64) << r.out << r.err;
  EXPECT_NE(r.err.find("-b must be at least 16 bytes"), std::string::npos) << r.err;
  r = bench({"p2p", "-b", "1G", "-e", "16M"});
  EXPECT_EQ(r.code, 64) << r.out << r.err;
  EXPECT_NE(r.err.find("is larger than -e"), std::string::npos) << r.err;
  r = bench({"p2p", "-b", "16M", "-e", "1G", "-f", "1"});
  EXPECT_EQ(r.code, 64) << r.out << r.err;
  EXPECT_NE(r.err.find("-f must be at least 2"), std::string::npos) << r.err;
  r = bench({"p2p", "-b", "lots"});
  EXPECT_EQ(r.code, 64) << r.out << r.err;
}

}  // namespace
}  // namespace epkit::cli
