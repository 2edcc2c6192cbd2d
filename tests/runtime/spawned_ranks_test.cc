// The pieces together: the spawner starts this test binary as two ranks; each
// finds its rank with discover(), meets the other through rank 0's store and
// reports. In "crash" mode rank 1 dies after joining, and rank 0 must exit
// naming it instead of waiting for its barrier.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>

#include "runtime/socket.h"
#include "runtime/spawner.h"
#include "runtime/store.h"

namespace epkit::runtime {
namespace {

using namespace std::chrono_literals;

// Runs only inside a spawned rank (see RunTwoRanks); disabled otherwise.
TEST(SpawnedRanks, DISABLED_RankBody) {
  auto env = host::Env::from_process();
  auto info = discover(env);
  if (!info || info->launcher != Launcher::epkit_spawn) ::_exit(10);
  auto session = open_store(*info, "box", "test", "", info->master_addr, Deadline::after(5s));
  if (!session) {
    std::fprintf(stderr, "%s\n", session.error().message.c_str());
    ::_exit(2);
  }
  if (env.get("EPKIT_TEST_MODE") == "crash" && info->rank == 1) {
    (void)session->store.set("joined/1", "1", Deadline::after(5s));
    ::_exit(7);  // no close(): the store takes it for a crash
  }
  auto met = session->store.barrier("done", Deadline::after(10s));
  if (!met) {
    std::fprintf(stderr, "rank %d: %s\n", info->rank, met.error().message.c_str());
    std::fflush(stderr);
    ::_exit(met.error().code == ErrorCode::unavailable ? k_exit_peer_lost : 3);
  }
  std::printf("rank %d of %d met everyone\n", info->rank, info->world_size);
  std::fflush(stdout);
  session->store.close();
  ::_exit(0);
}

struct Output {
  std::string out;
  std::string err;
};

Result<SpawnReport> run_two_ranks(const std::string& mode, Output& output) {
  auto port = [] {
    auto probe = listen_tcp("127.0.0.1", 0);
    return probe ? local_port(probe->get()).value_or(0) : std::uint16_t{0};
  }();
  LaunchOptions launch;
  launch.nproc_per_node = 2;
  auto agent = discover(
      host::Env(std::map<std::string, std::string>{{"MASTER_PORT", std::to_string(port)}}), launch);
  if (!agent) return agent.error();
  auto out = make_pipe();
  auto err = make_pipe();
  if (!out || !err) return make_error(ErrorCode::internal, "pipe");
  SpawnOptions options;
  options.argv = {"/proc/self/exe", "--gtest_also_run_disabled_tests",
                  "--gtest_filter=SpawnedRanks.DISABLED_RankBody"};
  options.agent = *agent;
  options.extra_env = {{"EPKIT_TEST_MODE", mode}};
  options.host_label = "box";
  options.out_fd = out->write.get();
  options.err_fd = err->write.get();
  auto report = spawn_local_ranks(options, host::Env::from_process(), Deadline::after(20s));
  out->write.reset();
  err->write.reset();
  char buffer[65536];
  ssize_t n;
  while ((n = ::read(out->read.get(), buffer, sizeof buffer)) > 0) output.out.append(buffer, n);
  while ((n = ::read(err->read.get(), buffer, sizeof buffer)) > 0) output.err.append(buffer, n);
  return report;
}

TEST(SpawnedRanks, TwoRanksFindEachOther) {
  Output output;
  auto report = run_two_ranks("ok", output);
  ASSERT_TRUE(report.ok()) << report.error().message;
  EXPECT_EQ(report->exit_code(), 0) << report->summary("box") << "\n" << output.err;
  EXPECT_NE(output.out.find("[box:0] rank 0 of 2 met everyone"), std::string::npos) << output.out;
  EXPECT_NE(output.out.find("[box:1] rank 1 of 2 met everyone"), std::string::npos) << output.out;
}

TEST(SpawnedRanks, ARankThatDiesIsNamedByTheOthersAndTheSpawner) {
  Output output;
  auto start = Clock::now();
  auto report = run_two_ranks("crash", output);
  ASSERT_TRUE(report.ok()) << report.error().message;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
  ASSERT_TRUE(report->first_failed_rank.has_value()) << report->summary("box");
  EXPECT_EQ(*report->first_failed_rank, 1) << report->summary("box");
  EXPECT_EQ(report->exit_code(), 7);
  EXPECT_EQ(report->summary("box"),
            "first failure: rank 1 (box:1) exited with code 7; rank 0 (box:0) exited with code 75");
  EXPECT_NE(output.err.find("[box:0] rank 0: box:1 disconnected"), std::string::npos) << output.err;
}

}  // namespace
}  // namespace epkit::runtime
