#include "runtime/spawner.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <thread>

#include "runtime/socket.h"

namespace epkit::runtime {
namespace {

using namespace std::chrono_literals;

// Output of a spawn collected through a pipe, as a list of lines.
class Sink {
 public:
  Sink() {
    auto pipe = make_pipe();
    if (!pipe) throw std::runtime_error("pipe");
    m_pipe = std::move(*pipe);
    ::fcntl(m_pipe.read.get(), F_SETFL, O_NONBLOCK);
  }
  int fd() const { return m_pipe.write.get(); }
  std::vector<std::string> lines() {
    std::string text;
    char buffer[4096];
    ssize_t n;
    while ((n = ::read(m_pipe.read.get(), buffer, sizeof buffer)) > 0) text.append(buffer, n);
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }

 private:
  Pipe m_pipe;
};

SpawnOptions shell(const std::string& script, int nproc, int out_fd, int err_fd) {
  SpawnOptions options;
  options.argv = {"sh", "-c", script};
  options.agent.spawn = true;
  options.agent.world_size = nproc * 2;
  options.agent.local_world_size = nproc;
  options.agent.rank = nproc;  // second node
  options.agent.node_rank = 1;
  options.agent.nnodes = 2;
  options.host_label = "node-b";
  options.out_fd = out_fd;
  options.err_fd = err_fd;
  options.stop_delay = 200ms;
  options.kill_grace = 1000ms;
  return options;
}

host::Env env_of(std::map<std::string, std::string> vars) {
  return host::Env(std::move(vars));
}

host::Env base_env() {
  return env_of({{"PATH", "/usr/bin:/bin"}});
}

bool contains(const std::vector<std::string>& lines, const std::string& line) {
  return std::find(lines.begin(), lines.end(), line) != lines.end();
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(Spawner, PrefixesEveryLineWithHostAndRank) {
  Sink out, err;
  auto report = spawn_local_ranks(
      shell("echo out $RANK/$WORLD_SIZE local $LOCAL_RANK; echo err $EPKIT_NODE_RANK >&2; "
            "printf 'no newline'",
            2, out.fd(), err.fd()),
      base_env(), Deadline::after(10s));
  ASSERT_TRUE(report.ok()) << report.error().message;
  EXPECT_EQ(report->exit_code(), 0);
  EXPECT_EQ(report->summary("node-b"), "all 2 ranks succeeded");
  auto lines = out.lines();
  EXPECT_TRUE(contains(lines, "[node-b:2] out 2/4 local 0")) << ::testing::PrintToString(lines);
  EXPECT_TRUE(contains(lines, "[node-b:3] out 3/4 local 1")) << ::testing::PrintToString(lines);
  EXPECT_TRUE(contains(lines, "[node-b:3] no newline")) << ::testing::PrintToString(lines);
  auto errors = err.lines();
  EXPECT_TRUE(contains(errors, "[node-b:2] err 1")) << ::testing::PrintToString(errors);
  EXPECT_EQ(errors.size(), 2u);
}

TEST(Spawner, FirstFailingRankIsNamedAndTheOthersAreStopped) {
  Sink out, err;
  auto start = Clock::now();
  auto report =
      spawn_local_ranks(shell("if [ $LOCAL_RANK = 1 ]; then sleep 0.2; exit 3; fi; exec sleep 30",
                              3, out.fd(), err.fd()),
                        base_env(), Deadline::after(20s));
  ASSERT_TRUE(report.ok()) << report.error().message;
  EXPECT_LT(seconds_since(start), 3.0);
  ASSERT_TRUE(report->first_failed_rank.has_value());
  EXPECT_EQ(*report->first_failed_rank, 4);
  EXPECT_EQ(report->exit_code(), 3);
  auto summary = report->summary("node-b");
  EXPECT_NE(summary.find("rank 4 (node-b:4) exited with code 3"), std::string::npos) << summary;
  EXPECT_NE(summary.find("stopped ranks 3, 5"), std::string::npos) << summary;
}

TEST(Spawner, DeadlineStopsRanksThatHang) {
  Sink out, err;
  auto start = Clock::now();
  auto options = shell("trap '' TERM; sleep 30 & wait", 2, out.fd(), err.fd());
  options.kill_grace = 300ms;
  auto report = spawn_local_ranks(options, base_env(), Deadline::after(500ms));
  ASSERT_TRUE(report.ok()) << report.error().message;
  EXPECT_LT(seconds_since(start), 3.0);
  EXPECT_TRUE(report->timed_out);
  EXPECT_EQ(report->exit_code(), 124);
  EXPECT_FALSE(report->first_failed_rank.has_value());
  for (const auto& child : report->children) {
    EXPECT_TRUE(child.stopped_by_us);
    EXPECT_EQ(child.signal, SIGKILL);  // it ignored SIGTERM
  }
}

TEST(Spawner, AProgramThatCannotRunIsAnError) {
  Sink out, err;
  auto options = shell("", 2, out.fd(), err.fd());
  options.argv = {"/nonexistent/epkit"};
  auto report = spawn_local_ranks(options, base_env(), Deadline::after(5s));
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.error().code, ErrorCode::not_found);
  EXPECT_NE(report.error().message.find("/nonexistent/epkit"), std::string::npos);
  options.argv.clear();
  EXPECT_FALSE(spawn_local_ranks(options, base_env(), Deadline::after(5s)).ok());
}

// The agent is killed; its ranks must not outlive it.
TEST(Spawner, RanksDieWithTheAgent) {
  // Orphans are re-parented to this process, so they can be reaped and
  // their fate checked.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  Sink pids;
  pid_t agent = ::fork();
  if (agent == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    auto options = shell("echo $$; exec sleep 30", 2, pids.fd(), 2);
    // A string, not a literal: GCC 12 at -O3 wrongly reports an overlapping
    // memcpy inside basic_string's literal assignment here (-Wrestrict, GCC
    // PR 105329).
    options.host_label = std::string("x");
    auto report = spawn_local_ranks(options, base_env(), Deadline::after(30s));
    ::_exit(report.ok() ? 0 : 1);
  }
  std::vector<pid_t> ranks;
  auto wait_until = Deadline::after(5s);
  while (ranks.size() < 2 && !wait_until.expired()) {
    for (const auto& line : pids.lines())
      ranks.push_back(std::atoi(line.substr(line.find(' ') + 1).c_str()));
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(ranks.size(), 2u);
  ::kill(agent, SIGKILL);
  ::waitpid(agent, nullptr, 0);
  for (pid_t rank : ranks) {
    int status = 0;
    pid_t done = 0;
    auto limit = Deadline::after(3s);
    while ((done = ::waitpid(rank, &status, WNOHANG)) == 0 && !limit.expired()) {
      std::this_thread::sleep_for(20ms);
    }
    EXPECT_EQ(done, rank) << "rank pid " << rank << " outlived its agent";
    if (done != rank) ::kill(rank, SIGKILL);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST(Spawner, LifelineWatchValidatesItsVariable) {
  EXPECT_FALSE(*watch_lifeline(host::Env()));
  auto bad = watch_lifeline(env_of({{"EPKIT_LIFELINE_FD", "x"}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("EPKIT_LIFELINE_FD='x'"), std::string::npos);
  EXPECT_FALSE(watch_lifeline(env_of({{"EPKIT_LIFELINE_FD", "987654"}})).ok());
}

TEST(Spawner, LifelineEndsTheRankWhenTheAgentIsGone) {
  auto pipe = make_pipe();
  ASSERT_TRUE(pipe.ok());
  pid_t rank = ::fork();
  if (rank == 0) {
    pipe->write.reset();
    host::Env env = env_of({{"EPKIT_LIFELINE_FD", std::to_string(pipe->read.get())}});
    if (!watch_lifeline(env).value_or(false)) ::_exit(1);
    ::sleep(10);
    ::_exit(0);
  }
  pipe->read.reset();
  std::this_thread::sleep_for(100ms);
  pipe->write.reset();  // the agent's end closes
  int status = 0;
  pid_t done = 0;
  auto limit = Deadline::after(3s);
  while ((done = ::waitpid(rank, &status, WNOHANG)) == 0 && !limit.expired()) {
    std::this_thread::sleep_for(20ms);
  }
  if (done != rank) ::kill(rank, SIGKILL);
  ASSERT_EQ(done, rank);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 143);
}

}  // namespace
}  // namespace epkit::runtime
