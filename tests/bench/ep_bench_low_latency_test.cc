// The CPU half of `epkit bench ep --mode low-latency`: DeepEP's byte
// accounting, its lines, the table and the JSON.
#include "bench/ep_bench_low_latency.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace epkit::bench {
namespace {

EpLowLatencyTiming timing(double avg) {
  return {avg, avg * 0.5, avg * 2, avg * 0.9};
}

EpLowLatencyRun run(bool fp8) {
  EpLowLatencyRun r;
  r.fp8 = fp8;
  r.selections = 1000;
  ep_low_latency_fill_bytes(r, 7168);
  r.pair = timing(100);
  r.dispatch = timing(40);
  r.combine = timing(50);
  r.dispatch_send = timing(10);
  r.dispatch_recv = timing(20);
  r.combine_send = timing(12);
  r.combine_recv = timing(25);
  return r;
}

EpLowLatencyReport report() {
  EpLowLatencyReport rep;
  rep.shape.ranks = 2;
  rep.checks.push_back({"recv_count", "pairs", {}, {}});
  rep.by_rank = {{run(true), run(false)}, {run(true), run(false)}};
  return rep;
}

TEST(EpBenchLowLatency, BytesAreDeepEpsPerSelectedPair) {
  // test_low_latency.py: hidden + hidden / 128 * 4 + 16 (FP8), hidden * 2.
  EXPECT_DOUBLE_EQ(ep_low_latency_dispatch_bytes_per_pair(true, 7168), 7168 + 224 + 16);
  EXPECT_DOUBLE_EQ(ep_low_latency_dispatch_bytes_per_pair(false, 7168), 14336 + 16);
  EXPECT_DOUBLE_EQ(ep_low_latency_combine_bytes_per_pair(7168), 14336);
  EXPECT_EQ(ep_low_latency_selections({0, 5, -1, 3, -1, 7}), 4);
  EpLowLatencyRun r = run(true);
  EXPECT_DOUBLE_EQ(r.dispatch_bytes, 1000.0 * 7408);
  EXPECT_DOUBLE_EQ(r.combine_bytes, 1000.0 * 14336);
}

TEST(EpBenchLowLatency, SummaryHasMeanMinMaxAndNumpysMedian) {
  EpLowLatencyTiming t = ep_low_latency_summarize({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(t.avg_us, 2.5);
  EXPECT_DOUBLE_EQ(t.min_us, 1);
  EXPECT_DOUBLE_EQ(t.max_us, 4);
  EXPECT_DOUBLE_EQ(t.median_us, 2.5);
  EXPECT_DOUBLE_EQ(ep_low_latency_summarize({}).avg_us, 0);
}

TEST(EpBenchLowLatency, DeepEpsLinesFromTheMeanTimes) {
  auto lines = ep_low_latency_deepep_lines(run(true), 1);
  ASSERT_EQ(lines.size(), 3U);
  // (7408 + 14336) x 1000 B / 100 us = 217.44 GB/s.
  EXPECT_EQ(lines[0],
            "[rank 1] Dispatch + combine bandwidth: 217.44 GB/s, avg_t=100.00 us, min_t=50.00 us, "
            "max_t=200.00 us");
  EXPECT_EQ(lines[1],
            "[rank 1] Dispatch bandwidth: 185.20 GB/s, avg_t=40.00 us | Combine bandwidth: "
            "286.72 GB/s, avg_t=50.00 us");
  EXPECT_EQ(lines[2],
            "[rank 1] Dispatch send/recv time: 10.00 + 20.00 us | Combine send/recv time: 12.00 + "
            "25.00 us");
}

TEST(EpBenchLowLatency, ReportPrintsEveryRanksLinesThenTheTable) {
  std::string out = render_ep_low_latency_report(report());
  EXPECT_EQ(out.rfind("[config] num_tokens=128, hidden=7168, num_topk=8, num_experts=288, ranks=2, "
                      "num_sms=24\n[check] recv_count (pairs): passed on 2 ranks\n\n[FP8 dispatch, "
                      "DeepEP's timing case]\n[rank 0] Dispatch + combine",
                      0),
            0U)
      << out;
  EXPECT_NE(out.find("[rank 1] Dispatch send/recv time"), std::string::npos);
  EXPECT_NE(out.find("[BF16 dispatch, no cast]"), std::string::npos);
  // The table: rank 0's medians, GB/s only where the call moves the bytes.
  EXPECT_NE(out.find("  dispatch+combine     fp8    no       90.00      100.00       50.00    "
                     "241.60\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("     dispatch recv    bf16   yes       18.00       20.00       10.00         "
                     "-\n"),
            std::string::npos)
      << out;
}

TEST(EpBenchLowLatency, FailedCheckStopsBeforeTheFigures) {
  EpLowLatencyReport rep = report();
  rep.checks[0].failed_ranks = {1};
  rep.checks[0].first_failure = "rank 1: local expert 3: recv_count 2, expected 3";
  EXPECT_FALSE(rep.checks_passed());
  std::string out = render_ep_low_latency_report(rep);
  EXPECT_NE(out.find("[check] recv_count (pairs): FAILED on rank 1: rank 1: local expert 3"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("Dispatch bandwidth"), std::string::npos);
}

TEST(EpBenchLowLatency, JsonHasTheTableRowsAndRoundTripsRuns) {
  auto j = ep_low_latency_report_json(report(), 0);
  EXPECT_EQ(j["mode"], "low-latency");
  EXPECT_EQ(j["num_experts"], 288);
  ASSERT_EQ(j["rows"].size(), 14U);
  EXPECT_EQ(j["rows"][0]["op"], "dispatch+combine");
  EXPECT_EQ(j["rows"][0]["dtype"], "fp8");
  EXPECT_EQ(j["rows"][0]["hook"], false);
  EXPECT_TRUE(j["rows"][3]["gbps"].is_null());
  EXPECT_EQ(j["by_rank"].size(), 2U);
  EpLowLatencyRun back;
  ASSERT_TRUE(from_json(to_json(run(false)), back));
  EXPECT_FALSE(back.fp8);
  EXPECT_EQ(back.selections, 1000);
  EXPECT_DOUBLE_EQ(back.combine_recv.max_us, 50);
  EXPECT_FALSE(from_json(nlohmann::json::object(), back));
  EXPECT_FALSE(from_json({{"dtype", "int8"}, {"selections", 1}}, back));
}

}  // namespace
}  // namespace epkit::bench
