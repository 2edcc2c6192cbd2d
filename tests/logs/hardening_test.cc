// `epkit logs` against hostile and unbounded input (issue 23): devices and
// fifos, binary streams, gzip bombs, pathological --slice patterns, and every
// wording NCCL used for the events the rules name.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <set>
#include <string>

#include "analyze_text.h"
#include "logs/analyzer.h"
#include "logs/reader.h"
#include "support/paths.h"
#include "support/temp_tree.h"

namespace epkit::logs {
namespace {

using test_util::analyze_text;

std::set<std::string> ids(const Report& r) {
  std::set<std::string> out;
  for (const auto& f : r.findings) out.insert(std::string(f.spec->id));
  return out;
}

void write_gzip(const std::string& path, const std::string& chunk, int repeats) {
  gzFile gz = gzopen(path.c_str(), "wb9");
  ASSERT_NE(gz, nullptr);
  for (int i = 0; i < repeats; ++i) gzwrite(gz, chunk.data(), static_cast<unsigned>(chunk.size()));
  gzclose(gz);
}

TEST(LogsHardening, DevicesAndFifosAreRefusedNotRead) {
  auto zero = LineReader::open("/dev/zero");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message.find("/dev/zero: is a character device"), std::string::npos)
      << zero.error().message;
  test::TempTree tree;
  std::string fifo = tree.path("pipe.log");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto start = std::chrono::steady_clock::now();
  auto r = analyze_inputs({fifo}, {});  // no writer: opening must not wait
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("is a fifo"), std::string::npos) << r.error().message;
  auto dir = LineReader::open(tree.path(""));
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.error().message.find("is a folder"), std::string::npos);
}

TEST(LogsHardening, BinaryInputStopsAfterTheSample) {
  // Zeros without a newline, as /dev/zero on stdin: one 64 KiB cut line
  // shows it binary and the reading stops there.
  std::string zeros(64u << 20, '\0');
  auto analyzer = Analyzer::create({});
  ASSERT_TRUE(analyzer.ok());
  analyzer->begin_file("zeros");
  auto reader = LineReader::from_memory(zeros);
  std::uint64_t lines = 0;
  Analyzer& a = *analyzer;
  ASSERT_TRUE(reader
                  .for_each_line([&](std::string_view line, std::uint64_t n) {
                    ++lines;
                    a.feed(line, n);
                    return a.wants_more();
                  })
                  .ok());
  EXPECT_EQ(lines, 1u);
  Report r = analyzer->finish();
  ASSERT_EQ(r.not_logs.size(), 1u);
  EXPECT_EQ(r.not_logs[0].kind, NotLog::binary);
  EXPECT_NE(r.not_logs[0].reason.find("in the first 64 KiB"), std::string::npos)
      << r.not_logs[0].reason;
}

TEST(LogsHardening, GzipBombOfZerosIsNotInflatedWhole) {
  test::TempTree tree;
  std::string bomb = tree.path("bomb.log.gz");
  write_gzip(bomb, std::string(1 << 20, '\0'), 2048);  // 2 GiB of zeros, ~2 MB on disk
  auto start = std::chrono::steady_clock::now();
  auto r = analyze_inputs({bomb}, {});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_LT(r->bytes, std::uint64_t{64} << 20);
  ASSERT_EQ(r->not_logs.size(), 1u);
  EXPECT_EQ(r->not_logs[0].kind, NotLog::binary);
  EXPECT_EQ(r->exit_code(), 64);
}

TEST(LogsHardening, TextGzipBombIsRefusedPastTheRatio) {
  test::TempTree tree;
  std::string bomb = tree.path("text.log.gz");
  std::string chunk;
  while (chunk.size() < (1u << 20)) chunk += "node1:1:1 [0] NCCL INFO x\n";
  write_gzip(bomb, chunk, 64);  // 64 MiB of one repeated line
  auto reader = LineReader::open(bomb, ReadLimits{.max_bytes = std::uint64_t{1} << 40,
                                                  .max_inflate_ratio = 50,
                                                  .inflate_slack = 8u << 20});
  ASSERT_TRUE(reader.ok());
  auto done = reader->for_each_line([](std::string_view, std::uint64_t) {});
  ASSERT_FALSE(done.ok());
  EXPECT_NE(done.error().message.find("gzip bomb"), std::string::npos) << done.error().message;
  EXPECT_NE(done.error().message.find("text.log.gz"), std::string::npos);
  // The defaults let a real compressed log through.
  auto fine = analyze_inputs({bomb}, {});
  EXPECT_TRUE(fine.ok()) << fine.error().message;
}

TEST(LogsHardening, ByteCapBoundsOneInput) {
  test::TempTree tree;
  std::string text;
  while (text.size() < (4u << 20)) text += "node1:1:1 [0] NCCL INFO line\n";
  tree.write("big.log", text);
  auto reader = LineReader::open(tree.path("big.log"), ReadLimits{.max_bytes = 1u << 20});
  ASSERT_TRUE(reader.ok());
  auto done = reader->for_each_line([](std::string_view, std::uint64_t) {});
  ASSERT_FALSE(done.ok());
  EXPECT_NE(done.error().message.find("big.log: more than 1 MiB"), std::string::npos)
      << done.error().message;
  EXPECT_LE(reader->bytes_read(), 1u << 20);
}

TEST(LogsHardening, SliceDotStarOnAHugeLineDoesNotRecurse) {
  // std::regex recursed once per character and overflowed the stack on a
  // 35 KB line; RE2 runs in linear time.
  std::string huge = "step 9 " + std::string(35000, 'x') + " iteration 3 loss 2.5\n";
  std::string coll = "h:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1\n";
  Report r =
      analyze_text(huge + coll + huge + coll + coll, Options{.slice_regex = "iteration.*loss"});
  ASSERT_EQ(r.slices.size(), 3u);
  EXPECT_EQ(r.slices[2].collectives[0].count, 2u);
  Report nested = analyze_text(std::string(60000, 'a') + "\n", Options{"(.*)*(a|.*)+b"});
  EXPECT_EQ(nested.slices.size(), 1u);
  auto bad = Analyzer::create(Options{"(.*"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("--slice"), std::string::npos);
}

// Every wording of the IB completion error NCCL has printed (2.4 to 2.30),
// as the format strings give it.
TEST(LogsHardening, CompletionErrorInEveryNcclWording) {
  const char* k_prefix = "node1:2201:2241 [0] NCCL WARN ";
  struct Case {
    const char* text;
    const char* id;
  };
  const Case cases[] = {
      // 2.4 - 2.9: no "from peer".
      {"NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129",
       "nccl.roce-unreachable"},
      {"NET/IB : Got completion with error 4, opcode 0, len 0, vendor err 81", "nccl.acs"},
      // 2.10 - 2.17.
      {"NET/IB : Got completion from peer 10.0.1.2<46213> with error 12, opcode 0, len 0, vendor "
       "err 129",
       "nccl.roce-unreachable"},
      // 2.18 - 2.19: request type and GIDs.
      {"NET/IB : Got completion from peer 10.0.1.2<46213> with error 4, opcode 0, len 0, vendor "
       "err 81 (Recv) localGid ::ffff:10.0.0.1 remoteGid ::ffff:10.1.1.2",
       "nccl.acs"},
      // 2.21 - 2.22: status=.
      {"NET/IB : Got completion from peer 10.0.1.2<46213> with status=12 opcode=0 len=0 vendor "
       "err 129 (Send) localGid ::ffff:10.0.0.1 remoteGid ::ffff:10.1.1.2",
       "nccl.roce-unreachable"},
      // 2.23 - 2.27: "NET/IB:" and the HCA.
      {"NET/IB: Got completion from peer 10.0.1.2<46213> with status=4 opcode=128 len=0 vendor err "
       "81 (Recv) hca mlx5_0",
       "nccl.acs"},
      // 2.28: status and opcode names, reqSize, req_type.
      {"NET/IB: Got completion from peer 10.0.1.2<46213> with status=IBV_WC_RETRY_EXC_ERR(12) "
       "opcode=IBV_WC_SEND(0) reqSize=1048576 vendor_err=129 req_type=Send hca mlx5_0",
       "nccl.roce-unreachable"},
      // 2.28 - 2.30: the GPU-initiated networking path.
      {"NET/IB/GIN: Got completion from peer 10.0.1.2<46213> with status=12 opcode=0 len=0 vendor "
       "err 129 (Send) hca mlx5_0",
       "nccl.roce-unreachable"},
      // 2.30: no reqSize.
      {"NET/IB: Got completion from peer 10.0.1.2<46213> with status=IBV_WC_LOC_PROT_ERR(4) "
       "opcode=IBV_WC_RECV(128) vendor_err=81  hca mlx5_0",
       "nccl.acs"},
  };
  for (const auto& c : cases) {
    Report r = analyze_text(std::string(k_prefix) + c.text + "\n");
    EXPECT_EQ(ids(r), std::set<std::string>{c.id}) << c.text;
  }
}

// The other rules' events in each wording NCCL 2.4 to 2.30 printed them.
TEST(LogsHardening, RuleWordingsAcrossNcclVersions) {
  struct Case {
    const char* text;
    const char* id;
  };
  const Case cases[] = {
      // GPU Direct RDMA without peer memory: 2.4, 2.8 - 2.12, 2.16 - 2.30.
      {"INFO NET/IB : GPU Direct RDMA Disabled for GPU 3[3] / HCA 0 'mlx5_0' (no module or not "
       "supported by GPU)",
       "nccl.gdr-disabled"},
      {"INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)",
       "nccl.gdr-disabled"},
      {"INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'", "nccl.gdr-disabled"},
      // The distance policy: 2.4, 2.8 - 2.23, 2.24 - 2.28.
      {"INFO NET/IB : GPU Direct RDMA Disabled for GPU 3[3] / HCA 0 (distance 5 >= 4)",
       "nccl.gdr-disabled"},
      {"INFO GPU Direct RDMA Disabled for GPU 1b000 / HCA 0 (distance 5 > 4)", "nccl.gdr-disabled"},
      {"INFO GPU Direct RDMA Disabled for GPU 3 / HCA 1a2b (distance 5 > 4)", "nccl.gdr-disabled"},
      // /dev/shm: 2.4 - 2.20, 2.24 - 2.30 (with errno), 2.12 - 2.30 extend.
      {"WARN Error while creating shared memory segment /dev/shm/nccl-Ab12Cd (size 9637888)",
       "nccl.shm"},
      // Opening a peer's segment is not about space (held-out NVIDIA/nccl#2059).
      {"WARN Error while attaching to shared memory segment /dev/shm/nccl-Ab12Cd (size 9637888), "
       "error: No such file or directory (2)",
       "nccl.shm-attach"},
      {"WARN Error: failed to extend /dev/shm/nccl-Ab12Cd to 9637892 bytes", "nccl.shm"},
      {"WARN Error: failed to extend /dev/shm/nccl-Ab12Cd to 9637892 bytes, error: No space left "
       "on device (28)",
       "nccl.shm"},
      {"WARN Error: failed to create shared memory file /dev/shm/nccl-Ab12Cd, error No space left "
       "on device (28)",
       "nccl.shm"},
      // Duplicate GPU (2.8 - 2.30) and version mismatch (2.24 - 2.30).
      {"WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000",
       "nccl.duplicate-gpu"},
      {"WARN Mismatched NCCL version detected : rank 0 version 22703 rank 5 version 22809",
       "nccl.version-mismatch"},
  };
  for (const auto& c : cases) {
    Report r = analyze_text(std::string("node1:2201:2241 [3] NCCL ") + c.text + "\n");
    EXPECT_EQ(ids(r), std::set<std::string>{c.id}) << c.text;
  }
}

TEST(LogsHardening, UnopenableDeviceIsItsOwnFindingTiedToTheCountMismatch) {
  // Alone: a warning naming the device and host.
  Report alone = analyze_text(
      "node3:4410:4452 [0] NCCL WARN NET/IB : Unable to open device erdma_1\n"
      "node3:4410:4452 [0] NCCL INFO NET/IB : Using [0]erdma_0:1/RoCE [RO]; OOB "
      "eth0:10.0.0.3<0>\n");
  ASSERT_EQ(ids(alone), std::set<std::string>{"nccl.ib-device-unopenable"});
  EXPECT_EQ(alone.findings[0].spec->severity, Severity::warn);
  EXPECT_EQ(alone.findings[0].details, std::vector<std::string>{"erdma_1 on node3"});
  EXPECT_EQ(alone.findings[0].spec->doctor_check, "rdma.devices");

  // Two nodes, one container without erdma_1's uverbs file.
  auto r = analyze_inputs({test::source_path("fixtures/logs/cases/erdma-partial-uverbs")}, {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(ids(*r), (std::set<std::string>{"nccl.ib-device-unopenable", "nccl.net-mismatch"}));
  const Finding* open = r->find("nccl.ib-device-unopenable");
  ASSERT_NE(open, nullptr);
  EXPECT_EQ(open->spec->severity, Severity::error);
  EXPECT_EQ(open->ranks, std::vector<std::string>{"node2:3202"});
  const Finding* mismatch = r->find("nccl.net-mismatch");
  ASSERT_NE(mismatch, nullptr);
  bool named = false;
  for (const auto& d : mismatch->details) named = named || d.find("erdma_1 on node2") != d.npos;
  EXPECT_TRUE(named);
}

}  // namespace
}  // namespace epkit::logs
