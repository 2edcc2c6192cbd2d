// Whether a GPU test program runs, skips or fails. The one rule every GPU
// test program follows (docs/architecture.md, "Tests"; docs/gpu-commands.md, "Tests"):
// - a machine without a GPU device skips (exit 77, SKIP in ctest) and says
//   why: no CUDA in this build, no /dev/nvidia* device node, or CUDA's
//   cudaErrorNoDevice;
// - any other CUDA failure (driver too old, driver/library mismatch, ...)
//   fails with CUDA's message: a broken GPU machine must not look like a
//   machine without GPUs;
// - EPKIT_REQUIRE_GPU=N (the device suites set it) turns a skip for want of
//   GPUs into a failure where fewer than N are usable (1 when N is not a
//   number); unset or 0, skips stay skips.
#pragma once

#include <string>

namespace epkit::test {

constexpr int k_skip_code = 77;

/// What the machine says (probe_gpus), apart from the decision so that the
/// decision is tested on the CPU with every answer.
struct GpuProbe {
  bool cuda_built = false;    // EPKIT_WITH_CUDA
  bool device_nodes = false;  // a /dev/nvidia<N> exists
  bool no_device = false;     // cudaGetDeviceCount said cudaErrorNoDevice
  bool cuda_failed = false;   // any other CUDA error
  std::string cuda_error;     // its name and message
  int count = 0;              // devices, when CUDA answered
};

enum class GpuVerdict { run, skip, fail };

struct GpuGate {
  GpuVerdict verdict = GpuVerdict::skip;
  int gpus = 0;        // usable devices (run)
  std::string reason;  // why it skips or fails
};

/// The decision for a case needing `need` GPUs, with EPKIT_REQUIRE_GPU's
/// value (`require`, 0 when unset).
GpuGate decide_gpus(const GpuProbe& probe, int need, int require);
/// EPKIT_REQUIRE_GPU: 0 when unset, empty or "0"; its number, or 1 when it
/// is set to anything else.
int required_gpus();
/// The machine's answer (CUDA, then /dev), asked in a child process: a
/// parent that started CUDA could not hand it to the ranks it forks.
GpuProbe probe_gpus();
/// For test programs: the usable GPUs when at least `need` are there;
/// otherwise prints the reason and exits 77 (skip) or 1 (fail).
int gpus_or_exit(int need = 1);

}  // namespace epkit::test
