// The GPU test programs' gate (tests/support/gpu_gate.h): skip only where
// there is no GPU device, fail on any other CUDA error, and fail instead of
// skipping under EPKIT_REQUIRE_GPU.
#include "support/gpu_gate.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace epkit::test {
namespace {

GpuProbe with_gpus(int n) {
  GpuProbe p;
  p.cuda_built = true;
  p.device_nodes = true;
  p.count = n;
  return p;
}

TEST(GpuGate, RunsWithEnoughGpus) {
  GpuGate g = decide_gpus(with_gpus(2), 2, 0);
  EXPECT_EQ(g.verdict, GpuVerdict::run);
  EXPECT_EQ(g.gpus, 2);
  EXPECT_EQ(decide_gpus(with_gpus(2), 1, 1).verdict, GpuVerdict::run);
}

TEST(GpuGate, SkipsWithoutCudaInTheBuild) {
  GpuGate g = decide_gpus(GpuProbe{}, 1, 0);
  EXPECT_EQ(g.verdict, GpuVerdict::skip);
  EXPECT_EQ(g.reason, "this build has no CUDA (EPKIT_WITH_CUDA=OFF)");
}

TEST(GpuGate, SkipsOnCudaErrorNoDevice) {
  GpuProbe p;
  p.cuda_built = true;
  p.no_device = true;
  GpuGate g = decide_gpus(p, 1, 0);
  EXPECT_EQ(g.verdict, GpuVerdict::skip);
  EXPECT_EQ(g.reason, "no GPU device: CUDA sees none (cudaErrorNoDevice or 0 devices)");
}

// Without /dev/nvidia* any CUDA error is the missing device (a container
// without GPUs has no driver either).
TEST(GpuGate, SkipsOnACudaErrorWithoutDeviceNodes) {
  GpuProbe p;
  p.cuda_built = true;
  p.cuda_failed = true;
  p.cuda_error = "cudaErrorInsufficientDriver: CUDA driver version is insufficient";
  GpuGate g = decide_gpus(p, 1, 0);
  EXPECT_EQ(g.verdict, GpuVerdict::skip);
  EXPECT_EQ(g.reason,
            "no GPU device: no /dev/nvidia* device node (CUDA says: cudaErrorInsufficientDriver: "
            "CUDA driver version is insufficient)");
}

// The old gate took every CUDA failure for "0 GPUs": a driver mismatch on a
// GPU machine skipped the whole suite.
TEST(GpuGate, FailsOnACudaErrorWithDeviceNodes) {
  GpuProbe p;
  p.cuda_built = true;
  p.device_nodes = true;
  p.cuda_failed = true;
  p.cuda_error =
      "cudaErrorSystemDriverMismatch: system has unsupported display driver / cuda "
      "driver combination";
  GpuGate g = decide_gpus(p, 1, 0);
  EXPECT_EQ(g.verdict, GpuVerdict::fail);
  EXPECT_EQ(g.reason, "CUDA fails on a machine with /dev/nvidia* devices: " + p.cuda_error);
}

TEST(GpuGate, TooFewGpusSkipsNamingBoth) {
  GpuGate g = decide_gpus(with_gpus(1), 2, 0);
  EXPECT_EQ(g.verdict, GpuVerdict::skip);
  EXPECT_EQ(g.reason, "needs 2 GPUs, this machine has 1");
  // EPKIT_REQUIRE_GPU=1 asks for one GPU: a case needing two still skips on
  // a one-GPU machine ...
  EXPECT_EQ(decide_gpus(with_gpus(1), 2, 1).verdict, GpuVerdict::skip);
  // ... and EPKIT_REQUIRE_GPU=2 makes it a failure.
  g = decide_gpus(with_gpus(1), 2, 2);
  EXPECT_EQ(g.verdict, GpuVerdict::fail);
  EXPECT_EQ(g.reason, "needs 2 GPUs, this machine has 1; EPKIT_REQUIRE_GPU=2 makes that a failure");
}

TEST(GpuGate, RequireGpuTurnsTheSkipIntoAFailure) {
  GpuProbe p;
  p.cuda_built = true;
  p.no_device = true;
  GpuGate g = decide_gpus(p, 1, 1);
  EXPECT_EQ(g.verdict, GpuVerdict::fail);
  EXPECT_EQ(g.reason,
            "no GPU device: CUDA sees none (cudaErrorNoDevice or 0 devices); "
            "EPKIT_REQUIRE_GPU=1 makes that a failure");
  EXPECT_EQ(decide_gpus(GpuProbe{}, 1, 1).verdict, GpuVerdict::fail);
}

TEST(GpuGate, RequireGpuValues) {
  const char* before = std::getenv("EPKIT_REQUIRE_GPU");
  std::string saved = before != nullptr ? before : "";
  ::unsetenv("EPKIT_REQUIRE_GPU");
  EXPECT_EQ(required_gpus(), 0);
  ::setenv("EPKIT_REQUIRE_GPU", "0", 1);
  EXPECT_EQ(required_gpus(), 0);
  ::setenv("EPKIT_REQUIRE_GPU", "", 1);
  EXPECT_EQ(required_gpus(), 0);
  ::setenv("EPKIT_REQUIRE_GPU", "1", 1);
  EXPECT_EQ(required_gpus(), 1);
  ::setenv("EPKIT_REQUIRE_GPU", "4", 1);
  EXPECT_EQ(required_gpus(), 4);
  ::setenv("EPKIT_REQUIRE_GPU", "yes", 1);
  EXPECT_EQ(required_gpus(), 1);
  if (before != nullptr)
    ::setenv("EPKIT_REQUIRE_GPU", saved.c_str(), 1);
  else
    ::unsetenv("EPKIT_REQUIRE_GPU");
}

}  // namespace
}  // namespace epkit::test
