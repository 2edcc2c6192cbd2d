#include "topo/hca_list.h"

#include <gtest/gtest.h>

#include "topo/example_host.h"
#include "topo/probe.h"

namespace epkit::topo {
namespace {

std::vector<std::string> resolve(const std::string& value, const Snapshot& snap) {
  return resolve_hca_filter(parse_device_filter(value), snap);
}

TEST(TopoHcaList, GrammarPrefixExactExcludePorts) {
  auto snap = probe(test::example_host("dgx-h100"));
  // Prefix match: "mlx5_1" selects mlx5_1 only (no mlx5_10 here), "mlx5" all.
  EXPECT_EQ(resolve("mlx5_1", snap), std::vector<std::string>{"mlx5_1:1"});
  EXPECT_EQ(resolve("mlx5", snap).size(), 11u);
  EXPECT_EQ(resolve("=mlx5_bond", snap), std::vector<std::string>{});
  EXPECT_EQ(resolve("=mlx5_bond_0", snap), std::vector<std::string>{"mlx5_bond_0:1"});
  EXPECT_EQ(resolve("mlx5_3:1,mlx5_0", snap), (std::vector<std::string>{"mlx5_3:1", "mlx5_0:1"}));
  EXPECT_EQ(resolve("mlx5_3:2", snap), std::vector<std::string>{});  // no port 2
  auto excluded = resolve("^=mlx5_bond", snap);
  EXPECT_EQ(excluded.size(), 11u);  // exact: "mlx5_bond" is not "mlx5_bond_0"
  excluded = resolve("^mlx5_bond,mlx5_8,mlx5_9", snap);
  EXPECT_EQ(excluded.size(), 8u);
  EXPECT_EQ(excluded.front(), "mlx5_0:1");
  EXPECT_EQ(excluded.back(), "mlx5_7:1");
}

TEST(TopoHcaList, NvshmemListsMatchWholeNames) {
  auto snap = probe(test::example_host("dgx-h100"));
  auto nvshmem = [&](const char* value) {
    return resolve_hca_filter(parse_device_filter(value, ListGrammar::nvshmem), snap);
  };
  EXPECT_EQ(nvshmem("mlx5_1"), std::vector<std::string>{"mlx5_1:1"});
  EXPECT_EQ(nvshmem("mlx5"), std::vector<std::string>{});  // no prefix matching in NVSHMEM
  EXPECT_EQ(nvshmem("").size(), 11u);                      // an empty list filters nothing
  EXPECT_EQ(nvshmem("^mlx5_bond_0,mlx5_8,mlx5_9").size(), 8u);
}

TEST(TopoHcaList, DeviceToHcaMapping) {
  auto ok = parse_device_to_hca_mapping("0:mlx5_0:1, 1:mlx5_1:1");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[1].gpu, 1);
  EXPECT_EQ((*ok)[1].hca, "mlx5_1");
  EXPECT_EQ((*ok)[1].port, 1);
  for (const char* bad : {"0:mlx5_0", "x:mlx5_0:1", "0::1", "0:mlx5_0:p", "0:mlx5_0:1,0:mlx5_1:1",
                          "0:mlx5_0:1,", "-1:mlx5_0:1"}) {
    auto r = parse_device_to_hca_mapping(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.error().message.find("gpu:hca:port"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace epkit::topo
