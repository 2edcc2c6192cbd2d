#include "host/env.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace epkit::host {
namespace {

TEST(Env, ParsesEnvOutput) {
  auto env = Env::parse("A=1\nexport B=two=2\n# comment\n\nMULTI=\"x\ny\"\nC=\n", "f");
  ASSERT_TRUE(env.ok()) << env.error().message;
  EXPECT_EQ(env->get("A"), "1");
  EXPECT_EQ(env->get("B"), "two=2");
  EXPECT_EQ(env->get("MULTI"), "x\ny");
  EXPECT_EQ(env->get("C"), "");
  EXPECT_FALSE(env->get_nonempty("C").has_value());
  EXPECT_FALSE(env->has("D"));
  EXPECT_EQ(env->origin(), "f");
}

// Quotes, export and comments as sh reads them: the quotes of
// NCCL_SOCKET_IFNAME="eth0,eth1" are not part of the value (they were, and
// gave a false FAIL).
TEST(Env, ReadsQuotesExportAndCommentsAsAShellWould) {
  auto env = Env::parse(
      "export NCCL_SOCKET_IFNAME=\"eth0,eth1\"\n"
      "NCCL_IB_HCA='=mlx5_0:1,mlx5_1:1'  # the rails\n"
      "\texport   SPACED=\"a b\" # trailing comment\n"
      "ESC=\"q\\\"uote \\$HOME \\\\ \\n\"\n"
      "LIT='$(touch /tmp/x) `id`'\n"
      "MIX=\"a\"'b'c\n"
      "BARE=x#y # comment\n"
      "HASH=#notacomment\n"
      "CRLF=\"v\"\r\n"
      "export ONLY_EXPORTED OTHER\n",
      "f.env");
  ASSERT_TRUE(env.ok()) << env.error().message;
  EXPECT_EQ(env->get("NCCL_SOCKET_IFNAME"), "eth0,eth1");
  EXPECT_EQ(env->get("NCCL_IB_HCA"), "=mlx5_0:1,mlx5_1:1");
  EXPECT_EQ(env->get("SPACED"), "a b");
  EXPECT_EQ(env->get("ESC"), "q\"uote $HOME \\ \\n");
  EXPECT_EQ(env->get("LIT"), "$(touch /tmp/x) `id`");
  EXPECT_EQ(env->get("MIX"), "abc");
  EXPECT_EQ(env->get("BARE"), "x#y");
  EXPECT_EQ(env->get("HASH"), "#notacomment");
  EXPECT_EQ(env->get("CRLF"), "v");
  EXPECT_FALSE(env->has("ONLY_EXPORTED"));
}

TEST(Env, QuotedValuesMaySpanLinesAndLineNumbersFollow) {
  auto env = Env::parse("A='one\ntwo'\nB=\"x\\\ny\"\njunk here\n", "f.env");
  ASSERT_FALSE(env.ok());
  // Line 5: the two quoted values took lines 1-4.
  EXPECT_NE(env.error().message.find("f.env:5: expected KEY=VALUE, got 'junk here'"),
            std::string::npos)
      << env.error().message;
  auto ok = Env::parse("A='one\ntwo'\nB=\"x\\\ny\"\n", "f.env");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->get("A"), "one\ntwo");
  EXPECT_EQ(ok->get("B"), "xy");
}

// A line that is no assignment was glued to the previous value.
TEST(Env, ALineThatIsNoAssignmentIsAnErrorNotAContinuation) {
  auto env = Env::parse("NCCL_IB_HCA=mlx5_0\nmlx5_1\n", "job.env");
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.error().code, ErrorCode::invalid);
  EXPECT_NE(env.error().message.find("job.env:2"), std::string::npos) << env.error().message;
  for (const char* bad : {"A = 1\n", "1A=2\n", "A-B=1\n", "export\n", "=x\n", "A=\"open\n",
                          "A='open\n", "A=\"x\" rm -rf /\n", "export A B=1 C\n"}) {
    EXPECT_FALSE(Env::parse(bad, "f").ok()) << bad;
  }
}

TEST(Env, DuplicateKeysAreReportedWithBothLines) {
  auto env = Env::parse("A=1\nB=2\n# x\nA=3\n", "dup.env");
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.error().message.find("dup.env:4"), std::string::npos) << env.error().message;
  EXPECT_NE(env.error().message.find("first on line 1"), std::string::npos) << env.error().message;
}

// --env-file DIR was an empty environment; /dev/zero filled memory.
TEST(Env, OnlyARegularFileOfBoundedSizeIsRead) {
  auto dir = Env::from_file("/tmp");
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.error().message.find("/tmp: a folder"), std::string::npos) << dir.error().message;
  auto zero = Env::from_file("/dev/zero");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message.find("character device"), std::string::npos)
      << zero.error().message;
  std::string big = ::testing::TempDir() + "/epkit-big.env";
  {
    std::FILE* f = std::fopen(big.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::string line = "A=" + std::string(1 << 20, 'x') + "\n";
    for (int i = 0; i < 5; ++i) std::fwrite(line.data(), 1, line.size(), f);
    std::fclose(f);
  }
  auto large = Env::from_file(big);
  std::remove(big.c_str());
  ASSERT_FALSE(large.ok());
  EXPECT_NE(large.error().message.find("larger than"), std::string::npos) << large.error().message;
}

TEST(Env, TempFilesGoToTmpdirWithUniqueNames) {
  std::string dir = ::testing::TempDir();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  Env env({{"TMPDIR", dir}}, "test");
  auto a = make_temp_file(env, "epkit-nccl-1-0-");
  auto b = make_temp_file(env, "epkit-nccl-1-0-");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->rfind(dir + "/epkit-nccl-1-0-", 0), 0u) << *a;
  EXPECT_NE(*a, *b);
  std::remove(a->c_str());
  std::remove(b->c_str());
  Env none({{"TMPDIR", "relative/dir"}}, "test");
  auto c = make_temp_file(none, "epkit-x-");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->rfind("/tmp/epkit-x-", 0), 0u) << *c;
  std::remove(c->c_str());
}

TEST(Env, RejectsGarbageNamingTheLine) {
  auto env = Env::parse("this is not an env file\n", "bad.env");
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.error().code, ErrorCode::invalid);
  EXPECT_NE(env.error().message.find("bad.env:1"), std::string::npos);
  auto nul = Env::parse(std::string_view("A=1\0\n", 5), "nul.env");
  EXPECT_FALSE(nul.ok());
}

TEST(Env, MissingFileIsAnError) {
  auto env = Env::from_file("/nonexistent/epkit.env");
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.error().message.find("/nonexistent/epkit.env"), std::string::npos);
}

TEST(Env, SplitsPathLists) {
  EXPECT_EQ(split_path_list("/a::/b:"), (std::vector<std::string>{"/a", "/b"}));
}

// The one writer of the process environment: what it sets, from_process
// reads; a name setenv refuses is an error naming it, not a silent no-op.
TEST(Env, SetProcessEnvIsSeenByFromProcess) {
  ASSERT_TRUE(set_process_env("EPKIT_TEST_SET_PROCESS_ENV", "a b=c").ok());
  EXPECT_EQ(Env::from_process().get("EPKIT_TEST_SET_PROCESS_ENV"), "a b=c");
  auto bad = set_process_env("EPKIT=BAD", "1");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::internal);
  EXPECT_NE(bad.error().message.find("setenv EPKIT=BAD"), std::string::npos) << bad.error().message;
  EXPECT_FALSE(Env::from_process().has("EPKIT"));
}

}  // namespace
}  // namespace epkit::host
