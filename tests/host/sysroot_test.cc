#include "host/sysroot.h"

#include <gtest/gtest.h>

#include "support/temp_tree.h"

namespace epkit::host {
namespace {

TEST(Sysroot, ReadsUnderTheRoot) {
  test::TempTree tree;
  tree.write("/sys/class/x/value", "  42\n");
  Sysroot fs(tree.root());
  EXPECT_EQ(fs.read_trimmed("/sys/class/x/value").value(), "42");
  auto missing = fs.read("/sys/class/x/none");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
  EXPECT_NE(missing.error().message.find("/sys/class/x/none"), std::string::npos);
}

TEST(Sysroot, ResolvesLinksInsideTheRoot) {
  test::TempTree tree;
  tree.write("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/vendor", "0x10de\n");
  tree.link("/sys/bus/pci/devices/0000:01:00.0",
            "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0");
  tree.link("/lib/abs", "/sys/bus/pci/devices/0000:01:00.0");  // absolute: inside the root
  Sysroot fs(tree.root());
  EXPECT_EQ(fs.resolve("/sys/bus/pci/devices/0000:01:00.0").value(),
            "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0");
  EXPECT_EQ(fs.resolve("/lib/abs/vendor").value(),
            "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/vendor");
  EXPECT_TRUE(fs.exists("/lib/abs/vendor"));
}

TEST(Sysroot, DanglingAndLoopingLinksAreErrors) {
  test::TempTree tree;
  tree.link("/a", "/b");
  tree.link("/b", "/a");
  tree.link("/c", "/nowhere");
  Sysroot fs(tree.root());
  EXPECT_EQ(fs.resolve("/a").error().code, ErrorCode::invalid);
  EXPECT_EQ(fs.resolve("/c").error().code, ErrorCode::not_found);
  EXPECT_FALSE(fs.exists("/c"));
  EXPECT_TRUE(fs.lstat("/c").ok());
}

TEST(Sysroot, ListsSorted) {
  test::TempTree tree;
  tree.write("/d/b", "");
  tree.write("/d/a", "");
  Sysroot fs(tree.root());
  EXPECT_EQ(fs.list("/d").value(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(fs.list("/none").error().code, ErrorCode::not_found);
}

TEST(Sysroot, PathHelpers) {
  EXPECT_EQ(join_path("/a/", "/b"), "/a/b");
  EXPECT_EQ(base_name("/a/b/c"), "c");
  EXPECT_EQ(dir_name("/a/b/c"), "/a/b");
  EXPECT_EQ(dir_name("/a"), "/");
}

}  // namespace
}  // namespace epkit::host
