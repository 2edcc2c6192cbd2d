#include "checks/registry.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace epkit::checks {
namespace {

TEST(Registry, IdsAreUniqueAndDotted) {
  std::set<std::string> seen;
  for (const auto& check : registry()) {
    EXPECT_TRUE(seen.insert(std::string(check.id)).second) << "duplicate id " << check.id;
    EXPECT_NE(check.id.find('.'), std::string_view::npos) << check.id;
    EXPECT_FALSE(check.title.empty()) << check.id;
    EXPECT_NE(check.run, nullptr) << check.id;
  }
}

TEST(Registry, WorseOrdersStatuses) {
  EXPECT_EQ(worse(Status::pass, Status::fail), Status::fail);
  EXPECT_EQ(worse(Status::warn, Status::unknown), Status::warn);
  EXPECT_EQ(worse(Status::skip, Status::pass), Status::pass);
  EXPECT_EQ(worse(Status::unknown, Status::pass), Status::unknown);
}

TEST(Registry, ExitCodesFollowNagios) {
  Report r;
  r.worst = Status::pass;
  EXPECT_EQ(exit_code(r), 0);
  r.worst = Status::skip;
  EXPECT_EQ(exit_code(r), 0);
  r.worst = Status::warn;
  EXPECT_EQ(exit_code(r), 1);
  r.worst = Status::fail;
  EXPECT_EQ(exit_code(r), 2);
  r.worst = Status::unknown;
  EXPECT_EQ(exit_code(r), 3);
}

}  // namespace
}  // namespace epkit::checks
