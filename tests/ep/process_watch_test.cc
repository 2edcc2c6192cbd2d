#include "ep/network_leg/process_watch.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace epkit::ep::network_leg {
namespace {

// A child that sleeps until killed, as a peer rank's process.
pid_t sleeper() {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::pause();
    ::_exit(0);
  }
  return pid;
}

std::optional<int> exited_within(ProcessWatch& watch, std::chrono::milliseconds bound) {
  const auto end = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < end) {
    if (auto r = watch.exited()) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::nullopt;
}

TEST(ProcessWatch, NamesThePeerWhoseProcessExitedEvenUnreaped) {
  const ProcessId me = ProcessWatch::self();
  if (me.pid_namespace == 0) GTEST_SKIP() << "no /proc/self/ns/pid here";
  const pid_t a = sleeper();
  const pid_t b = sleeper();
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);
  ProcessWatch watch({me,
                      {static_cast<std::uint32_t>(a), me.pid_namespace},
                      {static_cast<std::uint32_t>(b), me.pid_namespace}},
                     0);
  if (watch.watched() == 0) {
    ::kill(a, SIGKILL);
    ::kill(b, SIGKILL);
    ::waitpid(a, nullptr, 0);
    ::waitpid(b, nullptr, 0);
    GTEST_SKIP() << "pidfds are not supported here";
  }
  EXPECT_EQ(watch.watched(), 2);
  EXPECT_FALSE(watch.exited());
  // Killed and not reaped: a zombie has exited all the same.
  ::kill(b, SIGKILL);
  auto gone = exited_within(watch, std::chrono::seconds(5));
  ASSERT_TRUE(gone);
  EXPECT_EQ(*gone, 2);
  ::kill(a, SIGKILL);
  ::waitpid(a, nullptr, 0);
  ::waitpid(b, nullptr, 0);
  EXPECT_EQ(watch.exited(), 2);  // the first one stays the answer
}

TEST(ProcessWatch, LeavesOtherNamespacesAndUnknownsToTheTimeouts) {
  const ProcessId me = ProcessWatch::self();
  ProcessWatch watch(
      {me, {static_cast<std::uint32_t>(::getppid()), me.pid_namespace + 1}, {0, me.pid_namespace}},
      0);
  EXPECT_EQ(watch.watched(), 0);
  EXPECT_FALSE(watch.exited());
}

TEST(ProcessWatch, APeerAlreadyGoneCountsAsExited) {
  const ProcessId me = ProcessWatch::self();
  if (me.pid_namespace == 0) GTEST_SKIP() << "no /proc/self/ns/pid here";
  const pid_t a = sleeper();
  ::kill(a, SIGKILL);
  ::waitpid(a, nullptr, 0);  // reaped: the pid is free
  ProcessWatch watch({me, {static_cast<std::uint32_t>(a), me.pid_namespace}}, 0);
  if (watch.watched() == 0 && !watch.exited()) GTEST_SKIP() << "pidfds are not supported here";
  EXPECT_EQ(watch.exited(), 1);
}

}  // namespace
}  // namespace epkit::ep::network_leg
