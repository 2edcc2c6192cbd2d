#include "env/var_table.h"

#include <gtest/gtest.h>

#include "env/known_vars.h"

namespace epkit::env {
namespace {

TEST(VarTable, SortedUniqueAndEachEntryHasASource) {
  auto table = var_table();
  ASSERT_FALSE(table.empty());
  for (std::size_t i = 0; i < table.size(); ++i) {
    EXPECT_FALSE(table[i].source.empty()) << table[i].name;
    EXPECT_FALSE(table[i].type.empty()) << table[i].name;
    if (i > 0) {
      EXPECT_LT(table[i - 1].name, table[i].name);
    }
    if (table[i].until != Version{}) {
      EXPECT_LE(table[i].since, table[i].until) << table[i].name;
    }
    EXPECT_EQ(find_var(table[i].name), &table[i]);
  }
  EXPECT_EQ(find_var("NCCL_NOT_A_VARIABLE"), nullptr);
}

// The typo dictionary and the versioned table agree: every NCCL/NVSHMEM name
// the table lists is one the doctor knows as read by someone.
TEST(VarTable, EveryLibraryNameIsKnownToTheDoctor) {
  for (const auto& spec : var_table()) {
    std::string_view name = spec.name;
    if (!name.starts_with("NCCL_") && !name.starts_with("NVSHMEM_")) continue;
    EXPECT_TRUE(who_reads(name).has_value()) << name;
  }
}

TEST(VarTable, VersionRanges) {
  EXPECT_EQ(parse_version("2.28.9-1"), (Version{2, 28}));
  EXPECT_EQ(parse_version("3.4"), (Version{3, 4}));
  EXPECT_FALSE(parse_version("unknown").has_value());
  EXPECT_FALSE(parse_version("2").has_value());
  const VarSpec* ras = find_var("NCCL_RAS_ENABLE");
  ASSERT_NE(ras, nullptr);
  EXPECT_FALSE(reads(*ras, {2, 23}));
  EXPECT_TRUE(reads(*ras, {2, 24}));
  const VarSpec* old = find_var("NCCL_LL_THRESHOLD");
  ASSERT_NE(old, nullptr);
  EXPECT_FALSE(reads(*old, k_nccl_floor));
  EXPECT_TRUE(reads(*old, {2, 4}));
}

}  // namespace
}  // namespace epkit::env
