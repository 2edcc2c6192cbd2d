#include "host/libsearch.h"

#include <gtest/gtest.h>

#include "support/temp_tree.h"

namespace epkit::host {
namespace {

TEST(LibSearch, LibraryVersionIsTheNumericSuffix) {
  EXPECT_EQ(library_version("libibverbs.so.1.14.56.0"), "1.14.56.0");
  EXPECT_EQ(library_version("libibverbs.so.1"), "1");
  EXPECT_EQ(library_version("libibverbs.so"), "unknown");
  EXPECT_EQ(library_version("libfoo.so.1.2.bak"), "unknown");
  EXPECT_EQ(library_version("libfoo.so.1."), "unknown");
}

TEST(LibSearch, OrderIsLdLibraryPathThenConfThenDefaults) {
  test::TempTree tree;
  tree.write("/etc/ld.so.conf", "# comment\ninclude /etc/ld.so.conf.d/*.conf\n/opt/extra\n");
  tree.write("/etc/ld.so.conf.d/zz-cuda.conf", "/usr/local/cuda/lib64\n");
  tree.write("/etc/ld.so.conf.d/aa-mofed.conf", "/opt/mofed/lib  /opt/mofed/lib2 # two\n");
  tree.write("/etc/ld.so.conf.d/ignored.txt", "/not/read\n");
  Env env({{"LD_LIBRARY_PATH",
            "/usr/local/nvidia/lib64::/usr/local/gib/lib64;/usr/lib/x86_64-linux-gnu"}},
          "test");
  auto dirs = loader_search_dirs(Sysroot(tree.root()), env);
  std::vector<std::string> names;
  for (const auto& d : dirs) names.push_back(d.dir);
  std::vector<std::string> want = {"/usr/local/nvidia/lib64",
                                   "/usr/local/gib/lib64",
                                   "/usr/lib/x86_64-linux-gnu",
                                   "/opt/mofed/lib",
                                   "/opt/mofed/lib2",
                                   "/usr/local/cuda/lib64",
                                   "/opt/extra"};
  ASSERT_GE(names.size(), want.size());
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 7), want);
  EXPECT_EQ(dirs[0].origin, "LD_LIBRARY_PATH");
  EXPECT_EQ(dirs[2].position, 3);
  EXPECT_EQ(dirs[3].origin, "/etc/ld.so.conf.d/aa-mofed.conf");
  EXPECT_EQ(dirs[6].origin, "/etc/ld.so.conf");
  EXPECT_EQ(dirs[7].origin, "default");
  // /usr/lib/x86_64-linux-gnu came first through LD_LIBRARY_PATH: listed once.
  EXPECT_EQ(std::count(names.begin(), names.end(), "/usr/lib/x86_64-linux-gnu"), 1);
  EXPECT_EQ(std::count(names.begin(), names.end(), "/not/read"), 0);
}

TEST(LibSearch, IncludeCyclesEnd) {
  test::TempTree tree;
  tree.write("/etc/ld.so.conf", "include ld.so.conf\n/opt/a\n");
  auto dirs = loader_search_dirs(Sysroot(tree.root()), Env({}, "test"));
  EXPECT_EQ(dirs.front().dir, "/opt/a");
}

TEST(LibSearch, FindsEveryMatchInOrderWithRealPaths) {
  test::TempTree tree;
  tree.write("/usr/local/nvidia/lib64/libibverbs.so.1.14.56.0", "x");
  tree.link("/usr/local/nvidia/lib64/libibverbs.so.1", "libibverbs.so.1.14.56.0");
  tree.write("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0", "x");
  tree.link("/usr/lib/x86_64-linux-gnu/libibverbs.so.1", "libibverbs.so.1.14.50.0");
  tree.link("/opt/broken/libibverbs.so.1", "/home/kubernetes/bin/nvidia/lib64/libibverbs.so.1");
  Env env({{"LD_LIBRARY_PATH", "/opt/broken:/usr/local/nvidia/lib64"}}, "test");
  auto matches = find_library(Sysroot(tree.root()), env, "libibverbs.so.1");
  ASSERT_EQ(matches.size(), 2u);
  EXPECT_EQ(matches[0].dir, "/usr/local/nvidia/lib64");
  EXPECT_EQ(matches[0].origin, "LD_LIBRARY_PATH");
  EXPECT_EQ(matches[0].position, 2);
  EXPECT_EQ(matches[0].real_path, "/usr/local/nvidia/lib64/libibverbs.so.1.14.56.0");
  EXPECT_EQ(matches[0].version, "1.14.56.0");
  EXPECT_EQ(matches[1].node_path, "/usr/lib/x86_64-linux-gnu/libibverbs.so.1");
  EXPECT_EQ(matches[1].origin, "default");
  EXPECT_EQ(matches[1].version, "1.14.50.0");

  // Without LD_LIBRARY_PATH the system copy wins.
  auto plain = find_library(Sysroot(tree.root()), Env({}, "test"), "libibverbs.so.1");
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].version, "1.14.50.0");
  EXPECT_TRUE(find_library(Sysroot(tree.root()), env, "libnothing.so.1").empty());
}

}  // namespace
}  // namespace epkit::host
