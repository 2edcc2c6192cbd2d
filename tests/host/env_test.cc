#include "host/env.h"

#include <gtest/gtest.h>

namespace epkit::host {
namespace {

TEST(Env, ParsesEnvOutput) {
  auto env = Env::parse("A=1\nexport B=two=2\n# comment\n\nMULTI=x\ny\nC=\n", "f");
  ASSERT_TRUE(env.ok()) << env.error().message;
  EXPECT_EQ(env->get("A"), "1");
  EXPECT_EQ(env->get("B"), "two=2");
  EXPECT_EQ(env->get("MULTI"), "x\ny");
  EXPECT_EQ(env->get("C"), "");
  EXPECT_FALSE(env->get_nonempty("C").has_value());
  EXPECT_FALSE(env->has("D"));
  EXPECT_EQ(env->origin(), "f");
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

}  // namespace
}  // namespace epkit::host
