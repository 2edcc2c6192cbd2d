// GPU tests of `epkit test`, `epkit test ep` and `epkit bench`: they run the real binary on
// this machine's GPUs. A case that needs more GPUs than there are (or a build
// without CUDA) prints why and exits 77, which ctest reports as SKIP; a broken
// CUDA, or EPKIT_REQUIRE_GPU on a machine without GPUs, fails instead.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "support/gpu_gate.h"
#include "support/paths.h"

namespace {

// The GPUs, or the case ends here: SKIP (exit 77) where the machine has no
// GPU device or fewer than it needs, FAIL where CUDA is broken or
// EPKIT_REQUIRE_GPU asks for GPUs (support/gpu_gate.h).
int gpu_count() {
  static const int gpus = epkit::test::gpus_or_exit(1);
  return gpus;
}

void need_gpus(int n) {
  if (gpu_count() < n) epkit::test::gpus_or_exit(n);
}

// The flag that runs `ranks` ranks on this machine: nothing where there are
// enough GPUs, --oversubscribe (ranks share GPUs round-robin) where there are
// fewer. Only a machine without a GPU skips.
std::string ranks_flag(int ranks) {
  int have = gpu_count();
  if (have >= ranks) return "";
  need_gpus(1);
  std::cout << "note: " << ranks << " ranks share " << have << " GPU(s) (--oversubscribe)\n";
  return " --oversubscribe";
}

struct Shell {
  int code = -1;
  std::string out;
  double seconds = 0;
};

Shell shell(const std::string& command) {
  Shell r;
  auto start = std::chrono::steady_clock::now();
  FILE* pipe = ::popen(("export NCCL_NVLS_ENABLE=0; " + command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe) != nullptr) r.out += buf.data();
  int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "$ " << command << "  -> " << r.code << " in " << r.seconds << " s\n" << r.out;
  return r;
}

// EPKIT_BIN runs another copy (a build carried to a GPU machine).
std::string epkit() {
  const char* other = std::getenv("EPKIT_BIN");
  return other != nullptr && *other != 0 ? std::string(other) : epkit::test::epkit_binary();
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

TEST(EpkitTest, TwoRanks) {
  auto r = shell(epkit() + " test --nproc-per-node 2 --timeout 60" + ranks_flag(2));
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(count_of(r.out, "] OK\n"), 2u);
  EXPECT_NE(r.out.find("2 of 2 ranks OK"), std::string::npos);
  EXPECT_NE(r.out.find(" -> "), std::string::npos);  // a transport per peer
}

TEST(EpkitTest, FourRanks) {
  auto r = shell(epkit() + " test --nproc-per-node 4 --timeout 60" + ranks_flag(4));
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(count_of(r.out, "] OK\n"), 4u);
  EXPECT_NE(r.out.find("4 of 4 ranks OK"), std::string::npos);
}

TEST(EpkitTest, JsonSummary) {
  auto r = shell(epkit() + " test --nproc-per-node 2 --json" + ranks_flag(2));
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("\"ok\": true"), std::string::npos);
  EXPECT_NE(r.out.find("\"nccl_version\""), std::string::npos);
}

// One rank dies after NCCL started: the others must name it and exit well
// within the timeout instead of hanging in the all-reduce.
TEST(EpkitTest, KilledRankIsNamed) {
  auto r = shell("env EPKIT_TEST_KILL_RANK=1 " + epkit() + " test --nproc-per-node 2 --timeout 20" +
                 ranks_flag(2));
  EXPECT_NE(r.code, 0);
  EXPECT_LT(r.seconds, 20.0);
  EXPECT_NE(r.out.find("rank 1"), std::string::npos);
  EXPECT_NE(r.out.find(":1 disconnected"), std::string::npos);
}

// Two "nodes" on one host: two agents, each with its own NCCL_HOSTID (and GPU
// where there are two), joined through --nnodes/--node-rank/--master.
TEST(EpkitTest, FakeTwoNodes) {
  need_gpus(1);
  const bool two = gpu_count() >= 2;
  std::string common = " test --nnodes 2 --nproc-per-node 1 --master 127.0.0.1:29611 --timeout 60";
  auto r = shell(std::string("( env ") + (two ? "CUDA_VISIBLE_DEVICES=1 " : "") +
                 "NCCL_HOSTID=fake-b " + epkit() + common + " --node-rank 1 & env " +
                 (two ? "CUDA_VISIBLE_DEVICES=0 " : "") + "NCCL_HOSTID=fake-a " + epkit() + common +
                 " --node-rank 0; rc=$?; wait $!; rb=$?; exit $((rc + rb)) )");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("2 of 2 ranks OK on 2 nodes"), std::string::npos);
}

// Two faked nodes of two ranks each, all four on one GPU: the path the
// internode engine's checks take on a one-GPU machine.
TEST(EpkitTest, FakeTwoNodesSharingOneGpu) {
  need_gpus(1);
  std::string common =
      " test --nnodes 2 --nproc-per-node 2 --oversubscribe --master 127.0.0.1:29613 --timeout 60";
  auto r = shell("( env CUDA_VISIBLE_DEVICES=0 NCCL_HOSTID=fake-b " + epkit() + common +
                 " --node-rank 1 & env CUDA_VISIBLE_DEVICES=0 NCCL_HOSTID=fake-a " + epkit() +
                 common + " --node-rank 0; rc=$?; wait $!; rb=$?; exit $((rc + rb)) )");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("4 of 4 ranks OK on 2 nodes"), std::string::npos);
  EXPECT_NE(r.out.find("GPUs shared (--oversubscribe): 2 ranks on 1 GPU"), std::string::npos);
}

// More ranks than GPUs without the flag: refused once, naming the flag,
// exit 12 (no GPU for a rank), before any rank starts.
TEST(EpkitTest, MoreRanksThanGpusNeedsTheFlag) {
  need_gpus(1);
  int ranks = gpu_count() + 1;
  auto r = shell(epkit() + " test --nproc-per-node " + std::to_string(ranks) + " --timeout 20");
  EXPECT_EQ(r.code, 12);
  EXPECT_NE(r.out.find("pass --oversubscribe"), std::string::npos);
  EXPECT_EQ(r.out.find("] OK"), std::string::npos);
}

// Every collective on two GPUs with the data check: no wrong element.
TEST(EpkitBench, EveryCollectiveChecksItsData) {
  const std::string share = ranks_flag(2);
  for (const char* op :
       {"all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv", "broadcast"}) {
    auto r = shell(epkit() + " bench nccl " + op +
                   " --nproc-per-node 2 -b 1K -e 4M -f 16 -n 5 -w 1" + share);
    EXPECT_EQ(r.code, 0) << op;
    EXPECT_NE(r.out.find("Out of bounds values : 0 OK"), std::string::npos) << op;
    EXPECT_NE(r.out.find("     4194304 "), std::string::npos) << op;
  }
}

TEST(EpkitBench, MinBusbwFailsTheRun) {
  const std::string share = ranks_flag(2);
  auto r = shell(
      epkit() + " bench nccl all_reduce --nproc-per-node 2 -b 1M -e 1M --min-busbw 100000" + share);
  EXPECT_EQ(r.code, 13);
  auto ok = shell(epkit() + " bench nccl all_reduce --nproc-per-node 2 -b 1M -e 1M --json" + share);
  EXPECT_EQ(ok.code, 0);
  EXPECT_NE(ok.out.find("\"avg_busbw_gbps\""), std::string::npos);
}

TEST(EpkitBench, P2pMatrixHasEveryMode) {
  need_gpus(2);
  auto r = shell(epkit() + " bench p2p -b 64M -n 5");
  EXPECT_EQ(r.code, 0);
  for (const char* mode : {"copy engine, unidirectional", "copy engine, bidirectional",
                           "SM copy kernel, unidirectional", "SM copy kernel, bidirectional"}) {
    EXPECT_NE(r.out.find(mode), std::string::npos) << mode;
  }
  auto j = shell(epkit() + " bench p2p -b 16M -n 2 --json");
  EXPECT_EQ(j.code, 0);
  EXPECT_NE(j.out.find("\"matrices\""), std::string::npos);
}

// The EP conformance suite: 1 layout case, DeepEP's 24-case sweep and 10 edge
// cases (see ep_harness/conformance.cc); every one must pass on every rank.
constexpr std::size_t k_ep_cases = 37;

void expect_ep_passed(const Shell& r, int ranks) {
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(count_of(r.out, " ... passed\n"), k_ep_cases);
  EXPECT_EQ(count_of(r.out, "FAILED"), 0u);
  EXPECT_NE(r.out.find(std::to_string(k_ep_cases) + " cases on " + std::to_string(ranks) +
                       " ranks: " + std::to_string(k_ep_cases) + " passed, 0 failed"),
            std::string::npos);
  EXPECT_NE(r.out.find("[testing] Running with FP8, with top-k (async=True, previous=True"),
            std::string::npos);
}

TEST(EpConformance, TwoRanks) {
  expect_ep_passed(shell(epkit() + " test ep --nproc-per-node 2 --timeout 150" + ranks_flag(2)), 2);
}

TEST(EpConformance, FourRanks) {
  expect_ep_passed(shell(epkit() + " test ep --nproc-per-node 4 --timeout 150" + ranks_flag(4)), 4);
}

// The suite's test of itself: rank 0 flips one bit of its recv_x
// (EPKIT_TEST_EP_FLIP_BIT) in the first case, and the suite must catch it in
// that case only, naming the rank, and exit with the wrong-data code.
TEST(EpConformance, FlippedBitIsCaught) {
  auto r = shell("env EPKIT_TEST_EP_FLIP_BIT=0 " + epkit() +
                 " test ep --nproc-per-node 2 --tokens 512 --timeout 150" + ranks_flag(2));
  EXPECT_EQ(r.code, 10) << r.out;  // a case found wrong data
  EXPECT_EQ(count_of(r.out, " ... FAILED on rank "), 1u) << r.out;
  EXPECT_NE(r.out.find(" ... FAILED on rank 0: run-to-run recv_x"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" passed, 1 failed"), std::string::npos) << r.out;
}

// The low-latency mode (--mode low-latency): DeepEP's test_low_latency.py
// sweep (16 cases) and 5 edge cases, against the host reference.
constexpr std::size_t k_low_latency_cases = 21;

void expect_low_latency_passed(const Shell& r, int ranks) {
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(count_of(r.out, " ... passed\n"), k_low_latency_cases);
  EXPECT_EQ(count_of(r.out, "FAILED"), 0u);
  EXPECT_NE(r.out.find(std::to_string(k_low_latency_cases) + " cases on " + std::to_string(ranks) +
                       " ranks: " + std::to_string(k_low_latency_cases) + " passed, 0 failed"),
            std::string::npos);
  EXPECT_NE(r.out.find("[low-latency] rank-constant x, FP8 round_scale UE8M0, "
                       "return_recv_hook=True ... passed"),
            std::string::npos);
}

TEST(EpConformance, LowLatencyTwoRanks) {
  expect_low_latency_passed(
      shell(epkit() + " test ep --mode low-latency --nproc-per-node 2 --timeout 150" +
            ranks_flag(2)),
      2);
}

TEST(EpConformance, LowLatencyFourRanks) {
  expect_low_latency_passed(
      shell(epkit() + " test ep --mode low-latency --nproc-per-node 4 --timeout 150" +
            ranks_flag(4)),
      4);
}

// Internode: nodes faked by two node agents (on one GPU, distinct NCCL_HOSTID
// per rank, so NCCL's network leg runs over its socket transport); every
// case bitwise against the reference, which sums per node then over nodes.
std::string two_fake_nodes(const std::string& args, int port,
                           const std::string& command = "test ep") {
  const std::string common =
      " " + command + " --nnodes 2 --master 127.0.0.1:" + std::to_string(port) + " " + args;
  return "( env NCCL_HOSTID=fake-b " + epkit() + common + " --node-rank 1 >/dev/null 2>&1 & env " +
         "NCCL_HOSTID=fake-a " + epkit() + common +
         " --node-rank 0; rc=$?; wait $!; rb=$?; exit $((rc + rb)) )";
}

TEST(EpConformance, InternodeTwoNodesOneRankEach) {
  need_gpus(1);
  auto r = shell(two_fake_nodes("--nproc-per-node 1 --tokens 1024 --timeout 200" +
                                    std::string(gpu_count() < 2 ? " --oversubscribe" : ""),
                                29631));
  expect_ep_passed(r, 2);
  EXPECT_NE(r.out.find("(2 nodes x 1)"), std::string::npos) << r.out;
}

TEST(EpConformance, InternodeTwoNodesTwoRanksEach) {
  need_gpus(1);
  auto r = shell(two_fake_nodes("--nproc-per-node 2 --tokens 1024 --timeout 300" +
                                    std::string(gpu_count() < 4 ? " --oversubscribe" : ""),
                                29633));
  expect_ep_passed(r, 4);
  EXPECT_NE(r.out.find("(2 nodes x 2)"), std::string::npos) << r.out;
}

// The same conformance over the device-driven network leg (an emulated NIC
// per rank, CUDA IPC between the faked nodes), 2 x 2 and 4 x 1.
TEST(EpConformance, InternodeEmulatedLegTwoNodesTwoRanksEach) {
  need_gpus(1);
  auto r =
      shell(two_fake_nodes("--nproc-per-node 2 --tokens 1024 --network-leg emulated "
                           "--timeout 120" +
                               std::string(gpu_count() < 4 ? " --oversubscribe" : ""),
                           29637));
  expect_ep_passed(r, 4);
  EXPECT_NE(r.out.find("[network] emulated NIC"), std::string::npos) << r.out;
}

// The low-latency mode across two faked nodes of two ranks: rows to the node
// peer over NVLink, to the other node over the emulated NIC.
TEST(EpConformance, LowLatencyTwoNodesTwoRanksEach) {
  need_gpus(1);
  auto r =
      shell(two_fake_nodes("--mode low-latency --nproc-per-node 2 --network-leg emulated "
                           "--timeout 150" +
                               std::string(gpu_count() < 4 ? " --oversubscribe" : ""),
                           29641));
  expect_low_latency_passed(r, 4);
  EXPECT_NE(r.out.find("[network] emulated NIC"), std::string::npos) << r.out;
}

// Ring mode (fixed rings, outputs per call) over the same leg, and with
// rings shrunk to two chunks of two rows (wrap-around and back-pressure in
// every call).
TEST(EpConformance, InternodeRingModeTwoNodesTwoRanksEach) {
  need_gpus(1);
  for (const char* shrink : {"", " --ring-rows 4"}) {
    auto r = shell(two_fake_nodes(
        "--nproc-per-node 2 --tokens 1024 --network-leg emulated "
        "--rings --timeout 120" +
            std::string(shrink) + std::string(gpu_count() < 4 ? " --oversubscribe" : ""),
        29639));
    expect_ep_passed(r, 4);
  }
}

// bench ep across the same faked nodes: the checks pass bitwise, then
// test_internode.py's RDMA and NVL figures, logical and physical, and the
// table (the speed is the socket transport's, not judged).
TEST(EpBench, InternodeTwoNodesTwoRanksEach) {
  need_gpus(1);
  auto r =
      shell(two_fake_nodes("--nproc-per-node 2 --tokens 1024 --sms 24 --chunks 4 -w 2 "
                           "-n 5 --timeout 300" +
                               std::string(gpu_count() < 4 ? " --oversubscribe" : ""),
                           29635, "bench ep"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(count_of(r.out, "FAILED"), 0u) << r.out;
  for (const char* piece :
       {"ranks=4 (2 nodes x 2)", "[network] NCCL", "passed on 4 ranks", "(token, node) pairs",
        "[tuning] Best dispatch (FP8): SMs 24, NVL chunk 4: ", "GB/s (RDMA)", "GB/s (NVL)",
        "[tuning] Best combine: SMs 24, NVL chunk 4, ", "logical (DeepEP)", "physical (moved)"}) {
    EXPECT_NE(r.out.find(piece), std::string::npos) << piece << "\n" << r.out;
  }
}

// bench ep --mode low-latency: the data checks pass on 2 ranks sharing the
// GPU, then DeepEP's test_low_latency.py lines at its default sizes.
TEST(EpBench, LowLatencyTwoRanks) {
  need_gpus(1);
  auto r =
      shell(epkit() +
            " bench ep --mode low-latency --nproc-per-node 2 --iters 5 --warmup 2 --timeout 300" +
            ranks_flag(2));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(count_of(r.out, "FAILED"), 0u) << r.out;
  for (const char* piece :
       {"num_tokens=128, hidden=7168, num_topk=8, num_experts=288, ranks=2", "passed on 2 ranks",
        "[rank 0] Dispatch + combine bandwidth: ", "[rank 1] Dispatch bandwidth: ",
        "Dispatch send/recv time: ", "[BF16 dispatch, no cast]", "dispatch+combine"}) {
    EXPECT_NE(r.out.find(piece), std::string::npos) << piece << "\n" << r.out;
  }
}

// --json: the summary object, and --seed reproduces a run (it is echoed).
TEST(EpConformance, JsonSummary) {
  auto r =
      shell(epkit() + " test ep --nproc-per-node 2 --tokens 1024 --seed 42 --json --timeout 150" +
            ranks_flag(2));
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("\"ok\": true"), std::string::npos);
  EXPECT_NE(r.out.find("\"ranks\": 2"), std::string::npos);
  EXPECT_NE(r.out.find("\"cases\": " + std::to_string(k_ep_cases)), std::string::npos);
  EXPECT_NE(r.out.find("\"passed\": " + std::to_string(k_ep_cases)), std::string::npos);
  EXPECT_NE(r.out.find("\"failed\": 0"), std::string::npos);
  EXPECT_NE(r.out.find("\"seed\": 42"), std::string::npos);
  EXPECT_NE(r.out.find("\"failures\": []"), std::string::npos);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  // ctest names each case with --gtest_filter: a name that matches nothing
  // (a renamed or deleted case) must fail, not pass having run nothing. The
  // filter is applied inside RUN_ALL_TESTS, so the count is known after it.
  if (::testing::UnitTest::GetInstance()->test_to_run_count() == 0) {
    std::cout << "FAIL: no test matches the filter (" << ::testing::GTEST_FLAG(filter)
              << "): nothing ran\n";
    return 1;
  }
  return rc;
}
