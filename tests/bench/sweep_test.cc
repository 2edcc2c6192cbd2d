#include "bench/sweep.h"

#include <gtest/gtest.h>

namespace epkit::bench {
namespace {

TEST(BenchSweep, ParsesSizesWithBinaryUnits) {
  EXPECT_EQ(parse_size("512").value(), 512u);
  EXPECT_EQ(parse_size("8K").value(), 8192u);
  EXPECT_EQ(parse_size("16M").value(), 16u << 20);
  EXPECT_EQ(parse_size("1G").value(), 1u << 30);
  EXPECT_EQ(parse_size("1GB").value(), 1u << 30);
  EXPECT_EQ(parse_size("1.5K").value(), 1536u);
  EXPECT_FALSE(parse_size("").ok());
  EXPECT_FALSE(parse_size("M").ok());
  EXPECT_FALSE(parse_size("-1").ok());
  EXPECT_FALSE(parse_size("16X").ok());
  EXPECT_NE(parse_size("16X").error().message.find("unknown unit"), std::string::npos);
}

TEST(BenchSweep, StepsByFactorUpToTheMaximum) {
  auto s = size_sweep(16u << 20, 1u << 30, 4, 4, 1).value();
  EXPECT_EQ(s, (std::vector<std::size_t>{16u << 20, 64u << 20, 256u << 20, 1u << 30}));
  auto one = size_sweep(32u << 20, 32u << 20, 2, 4, 1).value();
  EXPECT_EQ(one, (std::vector<std::size_t>{32u << 20}));
}

TEST(BenchSweep, RoundsToWholeElementsPerRankAndRejectsBadRanges) {
  // alltoall over 3 ranks of floats: multiples of 12 bytes.
  auto s = size_sweep(100, 100, 2, 4, 3).value();
  EXPECT_EQ(s, (std::vector<std::size_t>{96}));
  EXPECT_FALSE(size_sweep(2, 2, 2, 4, 1).ok());  // less than one element
  EXPECT_FALSE(size_sweep(64, 32, 2, 4, 1).ok());
  EXPECT_FALSE(size_sweep(32, 64, 1, 4, 1).ok());
}

TEST(BenchSweep, BusBandwidthFactorsMatchNcclTests) {
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::all_reduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::all_gather, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::reduce_scatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::alltoall, 2), 0.5);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::broadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::sendrecv, 8), 1.0);
  auto m = make_measure(Collective::all_reduce, 2, 1000000000, 10000.0);  // 1 GB in 10 ms
  EXPECT_DOUBLE_EQ(m.algbw, 100.0);
  EXPECT_DOUBLE_EQ(m.busbw, 100.0);
}

TEST(BenchSweep, NamesCollectivesAndTypes) {
  EXPECT_EQ(parse_collective("alltoall").value(), Collective::alltoall);
  EXPECT_FALSE(parse_collective("all-reduce").ok());
  EXPECT_EQ(parse_type("float").value().size, 4u);
  EXPECT_EQ(parse_type("int64").value().size, 8u);
  EXPECT_FALSE(parse_type("half").ok());
}

TEST(BenchSweep, TableRowsFooterAndJson) {
  Row r;
  r.bytes = 16777216;
  r.count = 4194304;
  r.type = "float";
  r.redop = "sum";
  r.out_of_place = make_measure(Collective::all_reduce, 2, r.bytes, 100.0);
  r.out_of_place.wrong = 0;
  r.in_place = make_measure(Collective::all_reduce, 2, r.bytes, 200.0);
  r.in_place->wrong = 3;
  std::string line = table_row(r);
  EXPECT_NE(line.find("    16777216       4194304     float     sum      -1"), std::string::npos)
      << line;
  EXPECT_NE(line.find("167.77"), std::string::npos) << line;
  EXPECT_NE(table_header().find("#wrong"), std::string::npos);
  EXPECT_EQ(total_wrong({r}), 3u);
  EXPECT_NEAR(average_busbw({r}), (167.77216 + 83.88608) / 2, 1e-3);
  EXPECT_NE(table_footer({r}).find("Out of bounds values : 3 FAILED"), std::string::npos);
  auto j = to_json(r);
  EXPECT_EQ(j["size_bytes"], 16777216u);
  EXPECT_EQ(j["in_place"]["wrong"], 3u);
  Row a2a = r;
  a2a.in_place.reset();
  EXPECT_NE(table_row(a2a).find("N/A"), std::string::npos);
  EXPECT_TRUE(to_json(a2a)["in_place"].is_null());
}

}  // namespace
}  // namespace epkit::bench
