#include "host/sysroot.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

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

// A fifo in a node tree hung every passive command (doctor, topo, env); a
// folder or a device read as empty or without end.
TEST(Sysroot, ReadsRegularFilesOnlyNeverBlocking) {
  test::TempTree tree;
  tree.write("/sys/class/dmi/id/sys_vendor", "Google\n");
  tree.mkdir("/sys/class/dmi/id/product_name");
  ASSERT_EQ(::mkfifo(tree.path("/sys/class/dmi/id/board_vendor").c_str(), 0644), 0);
  tree.link("/sys/class/dmi/id/chassis_vendor", "/dev/zero");  // inside the root: missing
  Sysroot fs(tree.root());
  EXPECT_EQ(fs.read_trimmed("/sys/class/dmi/id/sys_vendor").value(), "Google");
  auto fifo = fs.read("/sys/class/dmi/id/board_vendor");
  ASSERT_FALSE(fifo.ok());
  EXPECT_EQ(fifo.error().code, ErrorCode::invalid);
  EXPECT_NE(fifo.error().message.find("/sys/class/dmi/id/board_vendor: a fifo"), std::string::npos)
      << fifo.error().message;
  auto dir = fs.read("/sys/class/dmi/id/product_name");
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.error().message.find("a folder"), std::string::npos) << dir.error().message;
  EXPECT_EQ(fs.read("/sys/class/dmi/id/chassis_vendor").error().code, ErrorCode::not_found);
  // The live node's devices are refused too.
  auto zero = Sysroot("/").read("/dev/zero");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message.find("character device"), std::string::npos);
}

TEST(Sysroot, ReadsAreCutAtTheLimit) {
  test::TempTree tree;
  tree.write("/proc/big", std::string(10000, 'x'));
  Sysroot fs(tree.root());
  EXPECT_EQ(fs.read("/proc/big", 100).value().size(), 100u);
  EXPECT_EQ(fs.read("/proc/big").value().size(), 10000u);
  auto strict = read_regular_file(tree.path("/proc/big"), "/proc/big", 100, OverLimit::fail);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.error().message.find("larger than 100 bytes"), std::string::npos);
  EXPECT_TRUE(read_regular_file(tree.path("/proc/big"), "/proc/big", 10000, OverLimit::fail).ok());
}

TEST(Sysroot, PathHelpers) {
  EXPECT_EQ(join_path("/a/", "/b"), "/a/b");
  EXPECT_EQ(base_name("/a/b/c"), "c");
  EXPECT_EQ(dir_name("/a/b/c"), "/a/b");
  EXPECT_EQ(dir_name("/a"), "/");
}

}  // namespace
}  // namespace epkit::host
