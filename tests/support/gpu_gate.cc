#include "support/gpu_gate.h"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#ifdef EPKIT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace epkit::test {

GpuGate decide_gpus(const GpuProbe& p, int need, int require) {
  GpuGate g;
  if (p.cuda_built && !p.cuda_failed && !p.no_device && p.count > 0) {
    g.gpus = p.count;
    if (p.count >= need) {
      g.verdict = GpuVerdict::run;
      return g;
    }
    g.reason =
        "needs " + std::to_string(need) + " GPUs, this machine has " + std::to_string(p.count);
  } else if (!p.cuda_built) {
    g.reason = "this build has no CUDA (EPKIT_WITH_CUDA=OFF)";
  } else if (p.cuda_failed && p.device_nodes) {
    // The device is there and CUDA cannot use it: a broken machine.
    g.verdict = GpuVerdict::fail;
    g.reason = "CUDA fails on a machine with /dev/nvidia* devices: " + p.cuda_error;
    return g;
  } else if (p.cuda_failed) {
    g.reason = "no GPU device: no /dev/nvidia* device node (CUDA says: " + p.cuda_error + ")";
  } else {
    g.reason = "no GPU device: CUDA sees none (cudaErrorNoDevice or 0 devices)";
  }
  if (require > 0 && g.gpus < require) {
    g.verdict = GpuVerdict::fail;
    g.reason += "; EPKIT_REQUIRE_GPU=" + std::to_string(require) + " makes that a failure";
    return g;
  }
  g.verdict = GpuVerdict::skip;
  return g;
}

int required_gpus() {
  const char* v = std::getenv("EPKIT_REQUIRE_GPU");
  if (v == nullptr || *v == 0 || std::strcmp(v, "0") == 0) return 0;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (end == v || *end != 0 || n < 1 || n > 1024) return 1;
  return static_cast<int>(n);
}

namespace {

bool has_device_nodes() {
  DIR* dir = ::opendir("/dev");
  if (dir == nullptr) return false;
  bool found = false;
  while (const dirent* e = ::readdir(dir)) {
    // /dev/nvidia0, /dev/nvidia1, ...: a GPU (nvidiactl, nvidia-uvm are not).
    if (std::strncmp(e->d_name, "nvidia", 6) == 0 && e->d_name[6] >= '0' && e->d_name[6] <= '9') {
      found = true;
      break;
    }
  }
  ::closedir(dir);
  return found;
}

}  // namespace

GpuProbe probe_gpus() {
  GpuProbe p;
  p.device_nodes = has_device_nodes();
#ifdef EPKIT_WITH_CUDA
  p.cuda_built = true;
  // The child writes "<code> <count> <message>": code 0 = devices, 1 = no
  // device, 2 = another CUDA error.
  int fds[2];
  if (::pipe(fds) != 0) {
    p.cuda_failed = true;
    p.cuda_error = std::string("pipe: ") + std::strerror(errno);
    return p;
  }
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    int count = 0;
    const cudaError_t rc = cudaGetDeviceCount(&count);
    const int code = rc == cudaSuccess ? 0 : rc == cudaErrorNoDevice ? 1 : 2;
    std::string line = std::to_string(code) + " " + std::to_string(rc == cudaSuccess ? count : 0);
    if (code == 2) line += std::string(" ") + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc);
    const char* at = line.data();
    std::size_t left = line.size();
    while (left > 0) {
      const ssize_t n = ::write(fds[1], at, left);
      if (n <= 0) break;
      at += n;
      left -= static_cast<std::size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string got;
  char buf[512];
  ssize_t n = 0;
  while (child > 0 && got.size() < 4096 && (n = ::read(fds[0], buf, sizeof buf)) > 0)
    got.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  if (child > 0) ::waitpid(child, &status, 0);
  int code = -1, count = 0, used = 0;
  if (child <= 0 || std::sscanf(got.c_str(), "%d %d %n", &code, &count, &used) < 2) {
    p.cuda_failed = true;
    p.cuda_error = child <= 0
                       ? std::string("fork: ") + std::strerror(errno)
                       : "the CUDA probe process died (status " + std::to_string(status) + ")";
  } else if (code == 1) {
    p.no_device = true;
  } else if (code == 2) {
    p.cuda_failed = true;
    p.cuda_error = got.substr(static_cast<std::size_t>(used));
  } else {
    p.count = count;
  }
#endif
  return p;
}

int gpus_or_exit(int need) {
  const GpuGate g = decide_gpus(probe_gpus(), need, required_gpus());
  if (g.verdict == GpuVerdict::run) return g.gpus;
  std::fprintf(stdout, "%s: %s\n", g.verdict == GpuVerdict::skip ? "SKIP" : "FAIL",
               g.reason.c_str());
  std::fflush(stdout);
  std::_Exit(g.verdict == GpuVerdict::skip ? k_skip_code : 1);
}

}  // namespace epkit::test
