#include "topo/device_filter.h"

#include <gtest/gtest.h>

namespace epkit::topo {
namespace {

TEST(TopoDeviceFilter, PrefixMatchesByDefault) {
  auto f = parse_device_filter("mlx5");
  EXPECT_FALSE(f.exclude);
  EXPECT_FALSE(f.exact);
  ASSERT_EQ(f.entries.size(), 1u);
  EXPECT_TRUE(f.selects("mlx5_0", 1));
  EXPECT_TRUE(f.selects("mlx5_bond_0", 1));
  EXPECT_FALSE(f.selects("ib0", 1));
  EXPECT_TRUE(f.notes.empty());
}

TEST(TopoDeviceFilter, EqualsMeansExactNamesAndPortsNarrow) {
  auto f = parse_device_filter("=mlx5_0:1,mlx5_1:1");
  EXPECT_TRUE(f.exact);
  EXPECT_TRUE(f.selects("mlx5_0", 1));
  EXPECT_FALSE(f.selects("mlx5_0", 2));
  EXPECT_FALSE(f.selects("mlx5_10", 1));  // a prefix match would take it
  EXPECT_TRUE(f.selects("mlx5_1", 1));
  EXPECT_FALSE(f.selects("mlx5_2", 1));
}

TEST(TopoDeviceFilter, CaretExcludesAndCombinesWithEquals) {
  auto f = parse_device_filter("^=mlx5_1,mlx5_4");
  EXPECT_TRUE(f.exclude);
  EXPECT_TRUE(f.exact);
  EXPECT_TRUE(f.selects("mlx5_0", 1));
  EXPECT_FALSE(f.selects("mlx5_1", 1));
  EXPECT_FALSE(f.selects("mlx5_4", 1));
  EXPECT_TRUE(f.selects("mlx5_11", 1));
}

TEST(TopoDeviceFilter, ExcludingOnePortKeepsTheOthers) {
  auto f = parse_device_filter("^mlx5_bond_0:1");
  EXPECT_FALSE(f.selects("mlx5_bond_0", 1));
  EXPECT_TRUE(f.selects("mlx5_bond_0", 2));
  EXPECT_TRUE(f.selects("mlx5_0", 1));
}

TEST(TopoDeviceFilter, MarksCountOnlyAtTheStartOfTheList) {
  auto f = parse_device_filter("mlx5_0,^mlx5_1");
  EXPECT_FALSE(f.exclude);
  ASSERT_EQ(f.entries.size(), 2u);
  EXPECT_EQ(f.entries[1].name, "^mlx5_1");
  EXPECT_FALSE(f.selects("mlx5_1", 1));
  ASSERT_EQ(f.notes.size(), 1u);
  EXPECT_NE(f.notes[0].find("^mlx5_1"), std::string::npos);
  // '=' before '^' is not a mark pair: "^x" becomes a literal name.
  auto g = parse_device_filter("=^mlx5_1");
  EXPECT_TRUE(g.exact);
  EXPECT_FALSE(g.exclude);
  EXPECT_EQ(g.notes.size(), 1u);
}

TEST(TopoDeviceFilter, EmptyListsFollowEachLibrary) {
  EXPECT_TRUE(parse_device_filter("").selects("mlx5_0", 1));
  EXPECT_TRUE(parse_device_filter("=").selects("mlx5_0", 1));
  // NCCL: nothing listed matches everything, so '^' alone excludes all.
  EXPECT_FALSE(parse_device_filter("^").selects("mlx5_0", 1));
  // NVSHMEM: an empty list filters nothing.
  EXPECT_TRUE(parse_device_filter("^", ListGrammar::nvshmem).selects("mlx5_0", 1));
  EXPECT_TRUE(parse_device_filter(",,").entries.empty());
}

TEST(TopoDeviceFilter, PortsParseLikeAtoi) {
  auto f = parse_device_filter("mlx5_0:x");
  ASSERT_EQ(f.entries.size(), 1u);
  EXPECT_EQ(f.entries[0].port, 0);
  EXPECT_FALSE(f.selects("mlx5_0", 1));  // port 0 never exists
  ASSERT_EQ(f.notes.size(), 1u);
  // NCCL ignores what follows the port.
  auto g = parse_device_filter("mlx5_0:1:2");
  EXPECT_EQ(g.entries[0].port, 1);
  EXPECT_TRUE(g.notes.empty());
}

TEST(TopoDeviceFilter, BlanksStayInNames) {
  auto f = parse_device_filter("mlx5_0, mlx5_1");
  ASSERT_EQ(f.entries.size(), 2u);
  EXPECT_EQ(f.entries[1].name, " mlx5_1");
  EXPECT_FALSE(f.selects("mlx5_1", 1));
  EXPECT_EQ(f.notes.size(), 1u);
}

TEST(TopoDeviceFilter, NvshmemMatchesWholeNamesOnly) {
  auto f = parse_device_filter("mlx5", ListGrammar::nvshmem);
  EXPECT_TRUE(f.exact);
  EXPECT_FALSE(f.selects("mlx5_0", 1));
  auto g = parse_device_filter("^mlx5_1:1", ListGrammar::nvshmem);
  EXPECT_FALSE(g.selects("mlx5_1", 1));
  EXPECT_TRUE(g.selects("mlx5_1", 2));
  EXPECT_TRUE(g.selects("mlx5_0", 1));
  auto h = parse_device_filter("=mlx5_0", ListGrammar::nvshmem);
  EXPECT_FALSE(h.selects("mlx5_0", 1));
  EXPECT_EQ(h.notes.size(), 1u);
}

TEST(TopoDeviceFilter, SocketInterfacesIgnorePorts) {
  auto f = parse_device_filter("eth");
  EXPECT_TRUE(f.selects("eth0"));
  EXPECT_TRUE(f.selects("eth10"));
  EXPECT_FALSE(f.selects("ens5"));
  auto g = parse_device_filter("=eth0");
  EXPECT_TRUE(g.selects("eth0"));
  EXPECT_FALSE(g.selects("eth01"));
  auto h = parse_device_filter("^docker,lo");
  EXPECT_FALSE(h.selects("docker0"));
  EXPECT_FALSE(h.selects("lo"));
  EXPECT_TRUE(h.selects("eth0"));
}

}  // namespace
}  // namespace epkit::topo
