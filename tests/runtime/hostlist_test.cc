#include "runtime/hostlist.h"

#include <gtest/gtest.h>

namespace epkit::runtime {
namespace {

using Names = std::vector<std::string>;

TEST(Hostlist, ExpandsRangesListsAndPadding) {
  EXPECT_EQ(*expand_hostlist("node1"), Names{"node1"});
  EXPECT_EQ(*expand_hostlist("gpu[01-03,7],login"),
            (Names{"gpu01", "gpu02", "gpu03", "gpu7", "login"}));
  EXPECT_EQ(*expand_hostlist("n[8-10]"), (Names{"n8", "n9", "n10"}));
  EXPECT_EQ(*expand_hostlist("n[08-10]"), (Names{"n08", "n09", "n10"}));
  EXPECT_EQ(*expand_hostlist("a[1-2]-ib"), (Names{"a1-ib", "a2-ib"}));
  EXPECT_EQ(*expand_hostlist("r[1-2]n[1-2]"), (Names{"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(*expand_hostlist("a,b,"), (Names{"a", "b"}));
}

TEST(Hostlist, RejectsMalformedListsNamingTheCause) {
  struct Case {
    const char* list;
    const char* why;
  };
  for (auto [list, why] :
       {Case{"gpu[1-3", "unbalanced '['"}, Case{"gpu1-3]", "unbalanced ']'"},
        Case{"gpu[3-1]", "backwards"}, Case{"gpu[a-b]", "not a number"},
        Case{"gpu[1-]", "not a number"}, Case{"", "empty name"}, Case{"a,,b", "empty name"},
        Case{"a[[1]]", "nested"}, Case{"a b", "whitespace"}, Case{"n[0-999999999]", "more than"},
        Case{"r[0-9999]n[0-9999]", "more than"}}) {
    auto hosts = expand_hostlist(list);
    ASSERT_FALSE(hosts.ok()) << list;
    EXPECT_EQ(hosts.error().code, ErrorCode::invalid);
    EXPECT_NE(hosts.error().message.find(why), std::string::npos) << hosts.error().message;
    EXPECT_NE(hosts.error().message.find(list), std::string::npos) << hosts.error().message;
  }
}

TEST(Hostlist, ExpandsTasksPerNode) {
  EXPECT_EQ(*expand_tasks_per_node("4"), std::vector<int>{4});
  EXPECT_EQ(*expand_tasks_per_node("4(x2),2"), (std::vector<int>{4, 4, 2}));
  for (const char* bad : {"", "x", "4(x)", "4(x2", "0", "4(x0)", "-1", "4(x99999999)"}) {
    EXPECT_FALSE(expand_tasks_per_node(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace epkit::runtime
