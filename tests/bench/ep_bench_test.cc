// The CPU half of `epkit bench ep`: byte accounting, statistics and the
// lines in DeepEP's format.
#include "bench/ep_bench.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace epkit::bench {
namespace {

EpRow row(EpOp op, int sms, int chunk, double median_us, double logical, double physical) {
  EpRow r;
  r.op = op;
  r.sms = sms;
  r.nvl_chunk = chunk;
  r.rank0 = {median_us, median_us * 0.9, median_us * 1.1};
  r.max_median_us = median_us * 1.2;
  r.logical_bytes = logical;
  r.physical_bytes = physical;
  return r;
}

TEST(EpBench, RowBytesAreDeepEpsFigures) {
  EXPECT_EQ(ep_row_bytes(EpOp::dispatch_bf16, 7168), 14336);
  EXPECT_EQ(ep_row_bytes(EpOp::combine, 7168), 14336);
  // FP8: one byte per channel and a 4-byte scale per 128 channels.
  EXPECT_EQ(ep_row_bytes(EpOp::dispatch_fp8, 7168), 7168 + 56 * 4);
  // DeepEP: recv_x.numel() * 2 * (1 + 4 / 128) / 2.
  const double rows = 14782;
  EXPECT_DOUBLE_EQ(ep_logical_bytes(EpOp::dispatch_fp8, 14782, 7168),
                   rows * 7168 * 2 * (1 + 4.0 / 128) / 2);
  EXPECT_DOUBLE_EQ(ep_logical_bytes(EpOp::dispatch_bf16, 14782, 7168), rows * 7168 * 2);
  EXPECT_DOUBLE_EQ(ep_logical_bytes(EpOp::combine, 14782, 7168), rows * 7168 * 2);
  // The anchor: DeepEP's 352.18 GB/s at 310.26 us is 14782 FP8 rows.
  EXPECT_NEAR(ep_gbps(ep_logical_bytes(EpOp::dispatch_fp8, 14782, 7168), 310.26), 352.18, 0.01);
  EXPECT_DOUBLE_EQ(ep_physical_bytes(EpOp::dispatch_bf16, 100, 128), 100.0 * 256);
  EXPECT_EQ(ep_gbps(1e9, 0), 0.0);
}

TEST(EpBench, RemoteRowsLeaveOutTheRanksOwn) {
  // 3 ranks; column j: rows rank j received from ranks 0..i.
  // Rank 1 got 5 from rank 0, 7 from itself, 2 from rank 2.
  const std::vector<int> m = {4,  5,  6,  //
                              10, 12, 9,  //
                              11, 14, 20};
  EXPECT_EQ(ep_remote_rows(m, 3, 1), 14 - 7);
  EXPECT_EQ(ep_remote_rows(m, 3, 0), 11 - 4);
  EXPECT_EQ(ep_remote_rows(m, 3, 2), 9);  // 20 - (20 - 9)
  EXPECT_EQ(ep_remote_rows(m, 3, 3), 0);
  EXPECT_EQ(ep_remote_rows({}, 3, 0), 0);
}

TEST(EpBench, MedianIsNumpys) {
  EpTiming odd = ep_summarize({5, 1, 3});
  EXPECT_DOUBLE_EQ(odd.median_us, 3);
  EXPECT_DOUBLE_EQ(odd.min_us, 1);
  EXPECT_DOUBLE_EQ(odd.avg_us, 3);
  EpTiming even = ep_summarize({4, 1, 2, 100});
  EXPECT_DOUBLE_EQ(even.median_us, 3);  // (2 + 4) / 2
  EXPECT_DOUBLE_EQ(even.avg_us, 26.75);
  EXPECT_DOUBLE_EQ(ep_summarize({}).median_us, 0);
}

TEST(EpBench, LinesAreDeepEpsFormat) {
  EXPECT_EQ(ep_config_line({4096, 7168, 8, 256, 4}),
            "[config] num_tokens=4096, hidden=7168, num_topk=8, num_experts=256, ranks=4");
  EpRow r = row(EpOp::dispatch_bf16, 24, 4, 500.0, 2.0e8, 1.5e8);
  EXPECT_EQ(ep_tuning_line(r),
            "[tuning] SMs 24, NVL chunk 4: 400.00 GB/s (NVL), 500.00 us, physical 300.00 GB/s");
  r.op = EpOp::dispatch_fp8;
  EXPECT_EQ(ep_best_line(r),
            "[tuning] Best dispatch (FP8): SMs 24, NVL chunk 4, 400.00 GB/s (NVL), t: 500.00 us, "
            "physical 300.00 GB/s");
  // DeepEP writes a colon after the chunk for combine.
  r.op = EpOp::combine;
  EXPECT_EQ(ep_best_line(r),
            "[tuning] Best combine: SMs 24, NVL chunk 4: 400.00 GB/s (NVL), t: 500.00 us, "
            "physical 300.00 GB/s");
  r.op = EpOp::dispatch_bf16;
  r.cached = false;
  EXPECT_EQ(ep_non_cached_line(r),
            "[tuning] Non-cached dispatch (BF16): SMs 24, NVL chunk 4, 400.00 GB/s (NVL), t: "
            "500.00 us, physical 300.00 GB/s");
}

TEST(EpBench, CheckLinesNameTheFailingRanks) {
  EpCheck ok{"dispatch (BF16)", "recv_x bitwise", {}, ""};
  EXPECT_EQ(ep_check_line(ok, 4),
            "[check] dispatch (BF16) vs reference (recv_x bitwise): passed on 4 ranks");
  EpCheck bad{"combine (BF16)", "combined_x bitwise", {1, 3}, "rank 1: combined_x differs"};
  EXPECT_EQ(ep_check_line(bad, 4),
            "[check] combine (BF16) vs reference (combined_x bitwise): FAILED on ranks 1, 3: "
            "rank 1: combined_x differs");
}

EpReport sample_report() {
  EpReport rep;
  rep.shape = {4096, 7168, 8, 256, 4};
  rep.sms = {24, 12};
  rep.chunks = {2, 4};
  rep.checks = {{"dispatch (BF16)", "recv_x bitwise", {}, ""}};
  rep.recv_rows = {15000, 14900, 15100, 14950};
  rep.remote_rows = {11250, 11100, 11300, 11200};
  for (EpOp op : {EpOp::dispatch_fp8, EpOp::dispatch_bf16, EpOp::combine}) {
    for (int sms : rep.sms) {
      // Chunk 4 is the faster at 24 SMs, chunk 2 at 12.
      rep.rows.push_back(row(op, sms, 2, sms == 24 ? 600 : 900, 2.0e8, 1.5e8));
      rep.rows.push_back(row(op, sms, 4, sms == 24 ? 500 : 1000, 2.0e8, 1.5e8));
    }
  }
  rep.non_cached = {row(EpOp::dispatch_fp8, 24, 4, 800, 2.0e8, 1.5e8),
                    row(EpOp::dispatch_bf16, 24, 4, 1000, 2.0e8, 1.5e8)};
  for (auto& r : rep.non_cached) r.cached = false;
  return rep;
}

TEST(EpBench, BestIsTheLowestMedianPerOpAndSmCount) {
  EpReport rep = sample_report();
  const EpRow* b24 = ep_best(rep.rows, EpOp::combine, 24);
  ASSERT_NE(b24, nullptr);
  EXPECT_EQ(b24->nvl_chunk, 4);
  const EpRow* b12 = ep_best(rep.rows, EpOp::combine, 12);
  ASSERT_NE(b12, nullptr);
  EXPECT_EQ(b12->nvl_chunk, 2);
  EXPECT_EQ(ep_best(rep.rows, EpOp::combine, 16), nullptr);
}

TEST(EpBench, ReportPrintsEachOpsRowsThenItsBest) {
  std::string text = render_ep_report(sample_report());
  const std::vector<std::string> in_order = {
      "[config] num_tokens=4096, hidden=7168, num_topk=8, num_experts=256, ranks=4\n",
      "[check] dispatch (BF16) vs reference (recv_x bitwise): passed on 4 ranks\n",
      "[bytes] rank 0 received 15000 rows, 11250 from other ranks",
      "[tuning] SMs 24, NVL chunk 2: 333.33 GB/s (NVL), 600.00 us, physical 250.00 GB/s\n",
      "[tuning] SMs 24, NVL chunk 4: 400.00 GB/s (NVL), 500.00 us",
      "[tuning] Best dispatch (FP8): SMs 24, NVL chunk 4, 400.00 GB/s",
      "[tuning] SMs 12, NVL chunk 2: 222.22 GB/s (NVL), 900.00 us",
      "[tuning] Best dispatch (FP8): SMs 12, NVL chunk 2, 222.22 GB/s",
      "[tuning] Non-cached dispatch (FP8): SMs 24, NVL chunk 4, 250.00 GB/s",
      "\n\n[tuning] SMs 24, NVL chunk 2",
      "[tuning] Best dispatch (BF16): SMs 24, NVL chunk 4,",
      "[tuning] Non-cached dispatch (BF16): SMs 24, NVL chunk 4, 200.00 GB/s",
      "[tuning] Best combine: SMs 24, NVL chunk 4: 400.00 GB/s",
      "[tuning] Best combine: SMs 12, NVL chunk 2: 222.22 GB/s",
  };
  std::size_t at = 0;
  for (const auto& piece : in_order) {
    std::size_t found = text.find(piece, at);
    ASSERT_NE(found, std::string::npos) << "missing or out of order: " << piece << "\n" << text;
    at = found + piece.size();
  }
}

TEST(EpBench, FailedChecksStopTheReportAfterTheCheckLines) {
  EpReport rep = sample_report();
  rep.checks.push_back({"combine (BF16)", "combined_x bitwise", {2}, "rank 2: combined_x"});
  EXPECT_FALSE(rep.checks_passed());
  std::string text = render_ep_report(rep);
  EXPECT_NE(text.find("FAILED on rank 2: rank 2: combined_x"), std::string::npos) << text;
  EXPECT_EQ(text.find("[tuning]"), std::string::npos) << text;
}

TEST(EpBench, JsonHasEveryRowAndTheBestPerOp) {
  auto j = ep_report_json(sample_report(), 0);
  EXPECT_EQ(j["config"]["ranks"], 4);
  EXPECT_EQ(j["config"]["sms"], nlohmann::json({24, 12}));
  EXPECT_TRUE(j["checks_passed"].get<bool>());
  ASSERT_EQ(j["rows"].size(), 12u);
  const auto& first = j["rows"][0];
  EXPECT_EQ(first["op"], "dispatch_fp8");
  EXPECT_EQ(first["sms"], 24);
  EXPECT_EQ(first["nvl_chunk"], 2);
  EXPECT_DOUBLE_EQ(first["median_us"].get<double>(), 600);
  EXPECT_DOUBLE_EQ(first["min_us"].get<double>(), 540);
  EXPECT_DOUBLE_EQ(first["max_rank_median_us"].get<double>(), 720);
  EXPECT_NEAR(first["logical_gbps"].get<double>(), 333.333, 0.001);
  EXPECT_NEAR(first["physical_gbps"].get<double>(), 250.0, 1e-9);
  EXPECT_EQ(j["non_cached"].size(), 2u);
  EXPECT_FALSE(j["non_cached"][0]["cached"].get<bool>());
  EXPECT_EQ(j["best"]["combine"]["overall"]["sms"], 24);
  EXPECT_EQ(j["best"]["combine"]["overall"]["nvl_chunk"], 4);
  EXPECT_EQ(j["best"]["combine"]["per_sms"].size(), 2u);
  EXPECT_EQ(j["recv_rows"][3], 14950);
  EXPECT_EQ(j["exit_code"], 0);
}

}  // namespace
}  // namespace epkit::bench
