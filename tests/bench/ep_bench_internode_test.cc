// `epkit bench ep` across nodes, the CPU half: DeepEP test_internode.py's
// byte counts, the bytes the engine moved, the lines and the table.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/ep_bench.h"

namespace epkit::bench {
namespace {

// 2 nodes x 2 ranks, DeepEP's hidden; rank 0 sent 4000 (token, node) pairs,
// 2000 of them to the other node, and received 8000 rows, 4000 over NVLink.
EpShape shape() {
  EpShape s;
  s.ranks = 4;
  s.nodes = 2;
  return s;
}

EpRankBytes rank0() {
  EpRankBytes b;
  b.recv_rows = 8000;
  b.remote_rows = 4000;
  b.pairs = {4000, 2000};
  return b;
}

// The engine's packed rows at hidden 7168, int64 top-8 with weights, 2 ranks
// per node (ep/internode's row format, padded to 16 bytes).
EpWireRows wire() {
  EpWireRows w;
  w.dispatch_fp8 = 7408;
  w.dispatch_bf16 = 14352;
  w.full_fp8 = 7504;
  w.full_bf16 = 14448;
  w.combine = 14336;
  w.messages = 544;
  return w;
}

EpRow timed(EpOp op, int sms, int chunk, double median_us, bool cached = true) {
  EpRow r;
  r.op = op;
  r.sms = sms;
  r.nvl_chunk = chunk;
  r.cached = cached;
  r.rank0 = {median_us, median_us, median_us};
  r.max_median_us = median_us;
  ep_fill_bytes(r, shape(), rank0(), wire());
  return r;
}

TEST(EpBenchInternode, PairsCountEveryNodeATokenReachesOwnIncluded) {
  // 3 tokens over 4 ranks in 2 nodes of 2: token 0 goes to ranks 0 and 3
  // (both nodes), token 1 to rank 1 only, token 2 nowhere.
  const std::vector<std::uint8_t> in_rank = {1, 0, 0, 1,  //
                                             0, 1, 0, 0,  //
                                             0, 0, 0, 0};
  EXPECT_EQ(ep_tokens_per_node(in_rank, 4, 2), (std::vector<int>{2, 1}));
  EXPECT_EQ(ep_tokens_per_node(in_rank, 4, 1), (std::vector<int>{1, 1, 0, 1}));
  EXPECT_TRUE(ep_tokens_per_node(in_rank, 4, 3).empty());  // nodes of unequal size
  EXPECT_TRUE(ep_tokens_per_node({1, 0, 1}, 4, 2).empty());
  EpNodePairs p = ep_node_pairs({1500, 2500}, 1);
  EXPECT_EQ(p.all, 4000);
  EXPECT_EQ(p.remote, 1500);
  EXPECT_EQ(ep_node_pairs({1500, 2500}, 7).remote, 4000);
}

TEST(EpBenchInternode, RdmaBytesAreDeepEpsAndTheWiresSeparately) {
  // test_internode.py: num_rdma_token_sent * hidden * 2, FP8 times
  // (1 + 4/128) / 2; combine's RDMA bytes are the BF16 dispatch's.
  EXPECT_DOUBLE_EQ(ep_rdma_logical_bytes(EpOp::dispatch_bf16, 4000, 7168), 4000.0 * 7168 * 2);
  EXPECT_DOUBLE_EQ(ep_rdma_logical_bytes(EpOp::dispatch_fp8, 4000, 7168),
                   4000.0 * 7168 * 2 * (1 + 4.0 / 128) / 2);
  EXPECT_DOUBLE_EQ(ep_rdma_logical_bytes(EpOp::combine, 4000, 7168), 4000.0 * 7168 * 2);
  EXPECT_DOUBLE_EQ(ep_rdma_physical_bytes(2000, 14352, 544), 2000.0 * 14352 + 544);
  // Seed 001's 81 GB/s (2 x 8 B200, 2048 tokens, about 1.99 nodes a token)
  // is about 722 us of DeepEP's dispatch kernel.
  EXPECT_NEAR(ep_gbps(ep_rdma_logical_bytes(EpOp::dispatch_bf16, 4076, 7168), 722), 80.9, 0.1);
  // A cached dispatch sends x (and scales) only; the first dispatch of a
  // batch sends the routing with it and the count messages.
  const EpWireRows w = wire();
  EXPECT_EQ(w.row(EpOp::dispatch_bf16, true), 14352);
  EXPECT_EQ(w.row(EpOp::dispatch_bf16, false), 14448);
  EXPECT_EQ(w.row(EpOp::dispatch_fp8, false), 7504);
  EXPECT_EQ(w.row(EpOp::combine, false), 14336);
  EXPECT_EQ(w.fixed(EpOp::dispatch_fp8, false), 544);
  EXPECT_EQ(w.fixed(EpOp::dispatch_fp8, true), 0);
  EXPECT_EQ(w.fixed(EpOp::combine, false), 0);
}

TEST(EpBenchInternode, NvlRowsAreThoseFromAnotherLocalIndex) {
  // 2 nodes x 2: rank 1 got 5, 7, 8, 6 rows from ranks 0..3. Ranks 1 and 3
  // share its local index: their rows reached it through itself.
  const std::vector<int> prefix = {5, 12, 20, 26};
  EXPECT_EQ(ep_nvl_remote_rows(prefix, 2, 1), 5 + 8);
  EXPECT_EQ(ep_nvl_remote_rows(prefix, 2, 2), 7 + 6);
  EXPECT_EQ(ep_nvl_remote_rows(prefix, 1, 0), 0);  // one rank per node: no NVLink
  EXPECT_EQ(ep_nvl_remote_rows(prefix, 0, 0), 0);
}

TEST(EpBenchInternode, FillSetsRdmaOnlyAcrossNodes) {
  EpRow r = timed(EpOp::dispatch_bf16, 24, 4, 700);
  EXPECT_DOUBLE_EQ(r.logical_bytes, 8000.0 * 14336);
  EXPECT_DOUBLE_EQ(r.physical_bytes, 4000.0 * 14336);
  EXPECT_DOUBLE_EQ(r.rdma_logical_bytes, 4000.0 * 14336);
  EXPECT_DOUBLE_EQ(r.rdma_physical_bytes, 2000.0 * 14352);
  EpRow full = timed(EpOp::dispatch_bf16, 24, 4, 700, false);
  EXPECT_DOUBLE_EQ(full.rdma_physical_bytes, 2000.0 * 14448 + 544);
  EpRow intra;
  intra.op = EpOp::dispatch_bf16;
  EpShape one = shape();
  one.nodes = 1;
  ep_fill_bytes(intra, one, rank0(), wire());
  EXPECT_DOUBLE_EQ(intra.logical_bytes, 8000.0 * 14336);
  EXPECT_EQ(intra.rdma_logical_bytes, 0);
  EXPECT_EQ(intra.rdma_physical_bytes, 0);
}

TEST(EpBenchInternode, LinesAreTestInternodesOrder) {
  EXPECT_EQ(ep_config_line(shape()),
            "[config] num_tokens=4096, hidden=7168, num_topk=8, num_experts=256, ranks=4 (2 "
            "nodes x 2)");
  EXPECT_EQ(ep_tuning_line(timed(EpOp::dispatch_bf16, 24, 4, 700), true),
            "[tuning] SMs 24, NVL chunk 4: 700.00 us, 81.92 GB/s (RDMA), 163.84 GB/s (NVL), "
            "physical 41.01 GB/s (RDMA), 81.92 GB/s (NVL)");
  // test_internode.py: a colon before the time for dispatch, a comma for
  // combine.
  EXPECT_EQ(ep_best_line(timed(EpOp::dispatch_fp8, 24, 4, 400), true),
            "[tuning] Best dispatch (FP8): SMs 24, NVL chunk 4: 400.00 us, 73.92 GB/s (RDMA), "
            "147.84 GB/s (NVL), physical 37.04 GB/s (RDMA), 73.92 GB/s (NVL)");
  EXPECT_EQ(ep_best_line(timed(EpOp::combine, 24, 4, 700), true),
            "[tuning] Best combine: SMs 24, NVL chunk 4, 700.00 us, 81.92 GB/s (RDMA), 163.84 "
            "GB/s (NVL), physical 40.96 GB/s (RDMA), 81.92 GB/s (NVL)");
  EXPECT_EQ(ep_non_cached_line(timed(EpOp::dispatch_bf16, 24, 4, 1000, false), true),
            "[tuning] Non-cached dispatch (BF16): SMs 24, NVL chunk 4: 1000.00 us, 57.34 GB/s "
            "(RDMA), 114.69 GB/s (NVL), physical 28.90 GB/s (RDMA), 57.34 GB/s (NVL)");
}

EpReport sample() {
  EpReport rep;
  rep.shape = shape();
  rep.sms = {24};
  rep.chunks = {2, 4};
  rep.network = "NCCL 2.28.3 (libnccl.so.2), one communicator of 2 ranks per rail";
  rep.checks = {{"dispatch (BF16)", "recv_x bitwise", {}, ""}};
  rep.recv_rows = {8000, 8100, 7900, 8000};
  rep.remote_rows = {4000, 4050, 3950, 4000};
  rep.node_pairs = {4000, 3990, 4010, 4000};
  rep.remote_node_pairs = {2000, 1990, 2010, 2000};
  rep.wire = wire();
  for (EpOp op : {EpOp::dispatch_fp8, EpOp::dispatch_bf16, EpOp::combine}) {
    rep.rows.push_back(timed(op, 24, 2, op == EpOp::dispatch_fp8 ? 500 : 800));
    rep.rows.push_back(timed(op, 24, 4, op == EpOp::dispatch_fp8 ? 400 : 700));
  }
  rep.non_cached = {timed(EpOp::dispatch_fp8, 24, 4, 600, false),
                    timed(EpOp::dispatch_bf16, 24, 4, 1000, false),
                    timed(EpOp::combine, 24, 4, 800)};
  rep.non_cached.back().staged = true;
  return rep;
}

TEST(EpBenchInternode, BytesLinesSayWhichFigureIsWhich) {
  const auto lines = ep_internode_bytes_lines(sample());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "[bytes] rank 0 sent 4000 (token, node) pairs, 2000 to other nodes; received 8000 "
            "rows, 4000 over NVLink");
  EXPECT_EQ(lines[1],
            "[bytes] logical (DeepEP's test_internode.py): (RDMA) every pair, its own node "
            "included, at 14336 B (FP8 7392 B); (NVL) every received row at the same");
  EXPECT_EQ(lines[2],
            "[bytes] physical (what the engine moved): (RDMA) the pairs to other nodes at the row "
            "it sends, 14352 B (FP8 7408 B; non-cached 14448 B, FP8 7504 B, plus 544 B of count "
            "messages), combine 14336 B; (NVL) the rows over NVLink at 14336 B (FP8 7392 B)");
}

TEST(EpBenchInternode, TableIsNcclTestsStyle) {
  const std::string golden =
      "#                                                      logical (DeepEP)    physical "
      "(moved)\n"
      "# operation                    SMs   NVL       time      RDMA       NVL      RDMA       "
      "NVL\n"
      "#                                  chunk       (us)    (GB/s)    (GB/s)    (GB/s)    "
      "(GB/s)\n"
      "  dispatch (FP8)                24     4     400.00     73.92    147.84     37.04     "
      "73.92\n"
      "  non-cached dispatch (FP8)     24     4     600.00     49.28     98.56     25.01     "
      "49.28\n"
      "  dispatch (BF16)               24     4     700.00     81.92    163.84     41.01     "
      "81.92\n"
      "  non-cached dispatch (BF16)    24     4    1000.00     57.34    114.69     28.90     "
      "57.34\n"
      "  combine                       24     4     700.00     81.92    163.84     40.96     "
      "81.92\n"
      "  combine, staged               24     4     800.00     71.68    143.36     35.84     "
      "71.68\n"
      "# best NVL chunk per op and SM count; times are rank 0's medians\n"
      "# logical: DeepEP test_internode.py's bytes (RDMA: every (token, node) pair, own node "
      "included; NVL: every received row)\n"
      "# physical: bytes the engine moved (RDMA: its packed rows to other nodes; NVL: rows from "
      "ranks with another local index)\n";
  EXPECT_EQ(ep_internode_table(sample()), golden);
}

TEST(EpBenchInternode, ReportPrintsNetworkLinesThenTheTable) {
  const std::string text = render_ep_report(sample());
  const std::vector<std::string> in_order = {
      "[config] num_tokens=4096, hidden=7168, num_topk=8, num_experts=256, ranks=4 (2 nodes x "
      "2)\n",
      "[network] NCCL 2.28.3 (libnccl.so.2), one communicator of 2 ranks per rail\n",
      "[check] dispatch (BF16) vs reference (recv_x bitwise): passed on 4 ranks\n",
      "[bytes] rank 0 sent 4000 (token, node) pairs",
      "[tuning] SMs 24, NVL chunk 2: 500.00 us, 59.14 GB/s (RDMA)",
      "[tuning] Best dispatch (FP8): SMs 24, NVL chunk 4: 400.00 us",
      "[tuning] Non-cached dispatch (FP8): SMs 24, NVL chunk 4: 600.00 us",
      "[tuning] Best dispatch (BF16): SMs 24, NVL chunk 4: 700.00 us",
      "[tuning] Best combine: SMs 24, NVL chunk 4, 700.00 us",
      "[tuning] Combine of rows outside the Buffer (staged): SMs 24, NVL chunk 4: 800.00 us",
      "#                                                      logical (DeepEP)",
      "  combine, staged ",
  };
  std::size_t at = 0;
  for (const auto& piece : in_order) {
    std::size_t found = text.find(piece, at);
    ASSERT_NE(found, std::string::npos) << "missing or out of order: " << piece << "\n" << text;
    at = found + piece.size();
  }
  // The intranode bytes line is not printed across nodes.
  EXPECT_EQ(text.find("from other ranks"), std::string::npos) << text;
}

TEST(EpBenchInternode, JsonNamesEachFigure) {
  auto j = ep_report_json(sample(), 0);
  EXPECT_EQ(j["config"]["nodes"], 2);
  EXPECT_EQ(j["config"]["ranks_per_node"], 2);
  EXPECT_EQ(j["config"]["network"],
            "NCCL 2.28.3 (libnccl.so.2), one communicator of 2 ranks per rail");
  EXPECT_EQ(j["node_pairs"][2], 4010);
  EXPECT_EQ(j["remote_node_pairs"][0], 2000);
  EXPECT_EQ(j["wire_row_bytes"]["dispatch_bf16"], 14352);
  EXPECT_EQ(j["wire_row_bytes"]["non_cached_dispatch_fp8"], 7504);
  EXPECT_EQ(j["count_message_bytes"], 544);
  for (const char* key : {"logical", "physical", "rdma_logical", "rdma_physical"}) {
    EXPECT_TRUE(j["accounting"][key].is_string()) << key;
  }
  const auto& bf16 = j["best"]["dispatch_bf16"]["overall"];
  EXPECT_EQ(bf16["nvl_chunk"], 4);
  EXPECT_NEAR(bf16["rdma_logical_gbps"].get<double>(), 81.92, 1e-9);
  EXPECT_NEAR(bf16["rdma_physical_gbps"].get<double>(), 41.0057, 1e-4);
  EXPECT_NEAR(bf16["logical_gbps"].get<double>(), 163.84, 1e-9);
  EXPECT_NEAR(bf16["physical_gbps"].get<double>(), 81.92, 1e-9);
  EXPECT_DOUBLE_EQ(j["non_cached"][1]["rdma_physical_bytes"].get<double>(), 2000.0 * 14448 + 544);
}

TEST(EpBenchInternode, IntranodeJsonHasNoRdmaFields) {
  EpReport rep = sample();
  rep.shape.nodes = 1;
  auto j = ep_report_json(rep, 0);
  EXPECT_EQ(j["config"]["nodes"], 1);
  EXPECT_FALSE(j["rows"][0].contains("rdma_logical_bytes"));
  EXPECT_FALSE(j.contains("wire_row_bytes"));
  EXPECT_FALSE(j["accounting"].contains("rdma_logical"));
  EXPECT_EQ(render_ep_report(rep).find("(RDMA)"), std::string::npos);
}

}  // namespace
}  // namespace epkit::bench
