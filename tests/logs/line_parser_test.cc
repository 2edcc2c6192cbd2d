#include "logs/line_parser.h"

#include <gtest/gtest.h>

namespace epkit::logs {
namespace {

TEST(LogsLineParser, NcclPrefix) {
  auto info = parse_line("node1:12345:12390 [3] NCCL INFO NCCL version 2.28.9+cuda13.0");
  EXPECT_EQ(info.level, Level::info);
  EXPECT_EQ(info.host, "node1");
  EXPECT_EQ(info.pid, 12345);
  EXPECT_EQ(info.cuda_dev, 3);
  EXPECT_EQ(info.rank_key, "node1:12345");
  EXPECT_EQ(info.message, "NCCL version 2.28.9+cuda13.0");
  EXPECT_EQ(info.launcher_rank, -1);
}

TEST(LogsLineParser, TimestampBeforeThePrefix) {
  // NCCL_DEBUG_TIMESTAMP_FORMAT puts a time in front of host:pid:tid.
  auto info = parse_line("[2026-11-21 05:02:11] node7:4242:4250 [5] NCCL INFO Using network IB");
  EXPECT_EQ(info.rank_key, "node7:4242");
  EXPECT_EQ(info.cuda_dev, 5);
  EXPECT_EQ(info.message, "Using network IB");
}

TEST(LogsLineParser, WarnAndTraceLevels) {
  EXPECT_EQ(parse_line("h.example.com:1:2 [0] NCCL WARN Failed").level, Level::warn);
  EXPECT_EQ(parse_line("h.example.com:1:2 [0] NCCL WARN Failed").host, "h.example.com");
  EXPECT_EQ(parse_line("h:1:2 [0] NCCL TRACE x").level, Level::trace);
}

TEST(LogsLineParser, LauncherPrefixes) {
  auto torchrun = parse_line("[rank3]:node2:77:78 [1] NCCL INFO Using network IB");
  EXPECT_EQ(torchrun.launcher_rank, 3);
  EXPECT_EQ(torchrun.rank_key, "node2:77");
  EXPECT_EQ(torchrun.message, "Using network IB");
  auto tee = parse_line("[default12]:hello");
  EXPECT_EQ(tee.launcher_rank, 12);
  EXPECT_EQ(tee.level, Level::none);
  EXPECT_EQ(tee.message, "hello");
  auto srun = parse_line("15: node3:9:9 [0] NCCL INFO x");
  EXPECT_EQ(srun.launcher_rank, 15);
  EXPECT_EQ(srun.host, "node3");
  auto both = parse_line("0: [rank4]:text");
  EXPECT_EQ(both.launcher_rank, 4);
}

TEST(LogsLineParser, NotPrefixes) {
  // A time is not an srun label, a bracketed word is not a rank.
  EXPECT_EQ(parse_line("12:30:01 started").launcher_rank, -1);
  EXPECT_EQ(parse_line("[info]: x").launcher_rank, -1);
  EXPECT_EQ(parse_line("[rank]: x").launcher_rank, -1);
  EXPECT_EQ(parse_line("[rank99999999999]: x").launcher_rank, -1);
  // Prose mentioning NCCL is not an NCCL line.
  auto prose = parse_line("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970");
  EXPECT_EQ(prose.level, Level::none);
  EXPECT_EQ(prose.rank_key, "");
}

TEST(LogsLineParser, MalformedPrefixesGiveNoRank) {
  for (std::string_view line :
       {"[0] NCCL INFO x", "host [0] NCCL INFO x", "h:p:t [0] NCCL INFO x", "h:1:2 [x] NCCL INFO x",
        ":1:2 [0] NCCL INFO x", "NCCL INFO bare", "h:1:2 0] NCCL WARN y", ""}) {
    auto info = parse_line(line);
    EXPECT_EQ(info.rank_key, "") << line;
  }
  EXPECT_EQ(parse_line("NCCL INFO bare").level, Level::info);
  EXPECT_EQ(parse_line("NCCL INFO bare").message, "bare");
}

// NCCL's WARN lines name the source line before the level ("%s:%d:%d [%d]
// %s:%d NCCL WARN "), TRACE lines a timestamp too; NVSHMEM_DEBUG's WARN the
// same. They name their rank like INFO lines.
TEST(LogsLineParser, WarnAndTraceLinesWithSourceLocationNameTheirRank) {
  auto warn = parse_line(
      "node48:34050:34121 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port "
      "error");
  EXPECT_EQ(warn.rank_key, "node48:34050");
  EXPECT_EQ(warn.cuda_dev, 0);
  EXPECT_EQ(warn.level, Level::warn);
  EXPECT_EQ(warn.source_path, "transport/net_ib.cc:93");
  EXPECT_EQ(warn.message, "NET/IB : Got async event : port error");
  auto trace = parse_line("node1:7:9 [2] 1234.567891 transport/net.cc:1302 NCCL TRACE x");
  EXPECT_EQ(trace.rank_key, "node1:7");
  EXPECT_EQ(trace.level, Level::trace);
  auto nvshmem =
      parse_line("node4:5151:5190 [2] /opt/nvshmem/src/host/init/init.cu:321 NVSHMEM WARN y");
  EXPECT_TRUE(nvshmem.nvshmem);
  EXPECT_EQ(nvshmem.rank_key, "node4:5151");
  EXPECT_EQ(nvshmem.source_path, "/opt/nvshmem/src/host/init/init.cu:321");
  // A pasted line whose host:pid:tid was cut: the timestamp is not one.
  auto pasted = parse_line(
      "[2025-02-11 14:03:51] [3] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_create_cq failed");
  EXPECT_EQ(pasted.rank_key, "");
  EXPECT_EQ(pasted.level, Level::warn);
}

// Pasted lines often start at the source location: it is still the source
// location (the CUDA failure's file names the subsystem), and nothing else
// is taken for one.
TEST(LogsLineParser, SourceLocationWithoutAPrefix) {
  auto bare = parse_line("transport/nvls.cc:165 NCCL WARN Cuda failure 'invalid argument'");
  EXPECT_EQ(bare.level, Level::warn);
  EXPECT_EQ(bare.source_path, "transport/nvls.cc:165");
  EXPECT_EQ(bare.rank_key, "");
  EXPECT_EQ(parse_line("[3] include/shm.h:28 NCCL WARN Call to posix_fallocate failed").source_path,
            "include/shm.h:28");
  EXPECT_EQ(parse_line("node1: NCCL WARN x").source_path, "");
  EXPECT_EQ(parse_line("gpu1:12:34 NCCL WARN x").source_path, "");
}

}  // namespace
}  // namespace epkit::logs
