// The harness's bounded GPU wait (ep_harness/bounded_wait.h): it returns
// when the work is done, carries a failure's cause, and ends with a timeout
// that says why where the work never finishes (a kernel that never ran).
#include "ep_harness/bounded_wait.h"

#include <gtest/gtest.h>

#include <chrono>

namespace epkit::harness {
namespace {

using std::chrono::microseconds;

TEST(BoundedWait, ReturnsOnceTheWorkIsDone) {
  int polls = 0;
  auto query = [&] {
    ++polls;
    return std::pair{polls < 3 ? Progress::running : Progress::done, std::string()};
  };
  auto r = wait_polled(query, runtime::Deadline::after_seconds(10), "the dispatch", 10,
                       ErrorCode::cuda, microseconds(1));
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(polls, 3);
}

TEST(BoundedWait, AFailureKeepsItsCause) {
  auto query = [] {
    return std::pair{Progress::failed,
                     std::string("cudaErrorLaunchFailure (unspecified launch failure)")};
  };
  auto r = wait_polled(query, runtime::Deadline::after_seconds(10), "the combine", 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::cuda);
  EXPECT_EQ(r.error().message, "the combine: cudaErrorLaunchFailure (unspecified launch failure)");
}

TEST(BoundedWait, WorkThatNeverFinishesEndsInANamedTimeout) {
  auto query = [] { return std::pair{Progress::running, std::string()}; };
  const auto start = std::chrono::steady_clock::now();
  auto r = wait_polled(query, runtime::Deadline::after_seconds(0.02), "the dispatch", 0.02,
                       ErrorCode::cuda, microseconds(50));
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::timeout);
  EXPECT_NE(r.error().message.find("the dispatch: the GPU had not finished this rank's work after "
                                   "0.02 s"),
            std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("a kernel that never started"), std::string::npos);
  EXPECT_GE(took, std::chrono::milliseconds(20));
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST(BoundedWait, TheHostBoundOutlastsTheKernelsBounds) {
  EXPECT_DOUBLE_EQ(gpu_wait_bound_s(60), 270);
  EXPECT_GT(gpu_wait_bound_s(3), 2 * 3.0);
}

}  // namespace
}  // namespace epkit::harness
