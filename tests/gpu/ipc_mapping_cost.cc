// What mapping a peer's memory through CUDA IPC costs in device memory: the
// term of Buffer::bytes_needed that grows with the peers a rank maps
// (docs/ep-internode.md, "Ring mode", memory). Processes on one GPU: each of
// EXPORTERS exporters allocates COUNT regions of each size, then sends their
// IPC handles down a pipe; the importer, holding them all, maps them one size
// at a time (COUNT from every exporter) and prints the GPU's free memory lost
// per mapping and per exporter (the first size also pays whatever a new pair
// of processes costs). Usage:
//   epkit_ipc_mapping_cost [EXPORTERS [COUNT [MIB...]]]
// (defaults 1, 16; 2 8 32 128 256; a size may be a fraction of a MiB).
// IPC_TOUCH_ALL=1 writes every byte of each mapping, not its first 256. A
// run ends within 300 s whatever hangs (SIGALRM; the children die with it).
//   epkit_ipc_mapping_cost mutual WORLD MIB
// WORLD processes each export one region and map every other's (as the ranks
// of a Buffer on the emulated NIC do); prints
//   ipc_mutual world=W mib=M lost_kib_per_process=K per_mapping=P
// (IPC_OWNER_WRITES=1: each owner writes its region before exporting it;
// IPC_TOUCH_ALL=1: each mapping written whole).
// Prints one line per size:
//   ipc_mapping exporters=P mib=M count=C lost_kib_per_mapping=K per_exporter=E
// then, for mapped host memory of each size (cudaHostAllocMapped, then with
// cudaHostAllocPortable too), allocated while the exporters live:
//   host_mapped others=P portable=0|1 mib=M count=C lost_kib_per_allocation=K
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "support/gpu_gate.h"

namespace {

bool write_all(int fd, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = write(fd, p, bytes);
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return true;
}

bool read_all(int fd, void* data, std::size_t bytes) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = read(fd, p, bytes);
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return true;
}

#define CHECK_CUDA(who, expr)                                                    \
  do {                                                                           \
    cudaError_t rc_ = (expr);                                                    \
    if (rc_ != cudaSuccess) {                                                    \
      std::fprintf(stderr, "%s: %s: %s\n", who, #expr, cudaGetErrorString(rc_)); \
      return 2;                                                                  \
    }                                                                            \
  } while (0)

// Allocates count regions of each size, sends the handles, then waits for
// the importer's byte before freeing them (their mappings must outlive the
// measurement).
int exporter(int to_importer, int from_importer, int count, const std::vector<double>& mib) {
  // Every region first, then the handles: the importer measures only once
  // it holds them all, so none of these allocations falls in its window.
  std::vector<void*> regions;
  for (double m : mib)
    for (int i = 0; i < count; ++i) {
      void* p = nullptr;
      CHECK_CUDA("exporter", cudaMalloc(&p, static_cast<std::size_t>(m * 1048576.0)));
      regions.push_back(p);
    }
  CHECK_CUDA("exporter", cudaDeviceSynchronize());
  for (void* p : regions) {
    cudaIpcMemHandle_t h;
    CHECK_CUDA("exporter", cudaIpcGetMemHandle(&h, p));
    if (!write_all(to_importer, &h, sizeof(h))) return 2;
  }
  char done = 0;
  if (!read_all(from_importer, &done, 1)) return 2;
  for (void* p : regions) cudaFree(p);
  return 0;
}

struct Exporter {
  pid_t pid = -1;
  int from = -1;  // its handles
  int to = -1;    // the importer's "done"
};

/// Forks a process running `child(to_parent, from_parent)` (its exit code),
/// with a pipe each way; pid -1 when a pipe or the fork failed.
template <class Child>
Exporter spawn(Child&& child) {
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) return {};
  const pid_t pid = fork();
  if (pid < 0) return {};
  if (pid == 0) {
    // A child dies with the parent: its reads of the parent's pipe are
    // otherwise unbounded (later children hold copies of the write end).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) _exit(2);
    close(up[0]);
    close(down[1]);
    _exit(child(up[1], down[0]));
  }
  close(up[1]);
  close(down[0]);
  return {pid, up[0], down[1]};
}

int importer(const std::vector<Exporter>& exporters, int count, const std::vector<double>& mib) {
  const char* touch = std::getenv("IPC_TOUCH_ALL");
  const bool touch_all = touch != nullptr && touch[0] == '1';
  CHECK_CUDA("importer", cudaFree(nullptr));
  std::vector<void*> mapped;
  const std::size_t per = mib.size() * static_cast<std::size_t>(count);
  std::vector<cudaIpcMemHandle_t> all(exporters.size() * per);
  for (std::size_t e = 0; e < exporters.size(); ++e)
    for (std::size_t i = 0; i < per; ++i)
      if (!read_all(exporters[e].from, &all[e * per + i], sizeof(cudaIpcMemHandle_t))) return 2;
  const auto P = static_cast<int>(exporters.size());
  for (std::size_t k = 0; k < mib.size(); ++k) {
    const double m = mib[k];
    std::vector<cudaIpcMemHandle_t> handles;
    for (std::size_t e = 0; e < exporters.size(); ++e) {
      const auto first =
          all.begin() + static_cast<std::ptrdiff_t>(e * per + k * static_cast<std::size_t>(count));
      handles.insert(handles.end(), first, first + count);
    }
    CHECK_CUDA("importer", cudaDeviceSynchronize());
    std::size_t before = 0, after = 0, total = 0;
    CHECK_CUDA("importer", cudaMemGetInfo(&before, &total));
    const auto bytes = static_cast<std::size_t>(m * 1048576.0);
    for (auto& h : handles) {
      void* p = nullptr;
      CHECK_CUDA("importer", cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
      // Touch it (all of it with IPC_TOUCH_ALL=1), so a mapping made on
      // first use is counted too.
      CHECK_CUDA("importer", cudaMemsetAsync(p, 0, touch_all ? bytes : 256));
      mapped.push_back(p);
    }
    CHECK_CUDA("importer", cudaDeviceSynchronize());
    CHECK_CUDA("importer", cudaMemGetInfo(&after, &total));
    const double lost_kib = (static_cast<double>(before) - static_cast<double>(after)) / 1024.0;
    std::printf(
        "ipc_mapping exporters=%d mib=%g count=%d lost_kib_per_mapping=%.1f per_exporter=%.1f\n", P,
        m, count, lost_kib / (P * count), lost_kib / P);
  }
  // Mapped host memory (the emulated NIC's request ring, grants and peer
  // tables), with and without cudaHostAllocPortable, while the exporters'
  // contexts are alive beside this one.
  for (const unsigned flags : {cudaHostAllocMapped, cudaHostAllocMapped | cudaHostAllocPortable})
    for (const double m : mib) {
      CHECK_CUDA("importer", cudaDeviceSynchronize());
      std::size_t before = 0, after = 0, total = 0;
      CHECK_CUDA("importer", cudaMemGetInfo(&before, &total));
      std::vector<void*> pinned;
      for (int i = 0; i < count; ++i) {
        void* p = nullptr;
        CHECK_CUDA("importer", cudaHostAlloc(&p, static_cast<std::size_t>(m * 1048576.0), flags));
        pinned.push_back(p);
      }
      CHECK_CUDA("importer", cudaMemGetInfo(&after, &total));
      for (void* p : pinned) cudaFreeHost(p);
      std::printf(
          "host_mapped others=%d portable=%d mib=%g count=%d lost_kib_per_allocation=%.1f\n", P,
          (flags & cudaHostAllocPortable) != 0 ? 1 : 0, m, count,
          (static_cast<double>(before) - static_cast<double>(after)) / 1024.0 / count);
    }
  for (void* p : mapped) cudaIpcCloseMemHandle(p);
  const char done = 1;
  for (const auto& e : exporters)
    if (!write_all(e.to, &done, 1)) return 2;
  return 0;
}

// mutual mode: each of `world` processes allocates one region, the parent
// hands every handle to every process, each maps all the others' (as every
// rank of a Buffer on the emulated NIC does); the parent prints the GPU's
// free memory lost per process. Child: its handle up, all handles down,
// "mapped" up, then it waits for the parent's word to exit.
int mutual_child(int up, int down, int world, int me, double mib) {
  void* mine = nullptr;
  const auto bytes = static_cast<std::size_t>(mib * 1048576.0);
  CHECK_CUDA("mutual", cudaMalloc(&mine, bytes));
  // IPC_OWNER_WRITES=1: the owner writes all of it first (a Buffer zeroes
  // and fills its regions).
  if (const char* w = std::getenv("IPC_OWNER_WRITES"); w != nullptr && w[0] == '1') {
    CHECK_CUDA("mutual", cudaMemset(mine, 1, bytes));
    CHECK_CUDA("mutual", cudaDeviceSynchronize());
  }
  cudaIpcMemHandle_t h;
  CHECK_CUDA("mutual", cudaIpcGetMemHandle(&h, mine));
  if (!write_all(up, &h, sizeof(h))) return 2;
  std::vector<cudaIpcMemHandle_t> all(static_cast<std::size_t>(world));
  for (auto& one : all)
    if (!read_all(down, &one, sizeof(one))) return 2;
  std::vector<void*> mapped;
  for (int r = 0; r < world; ++r) {
    if (r == me) continue;
    void* p = nullptr;
    CHECK_CUDA("mutual", cudaIpcOpenMemHandle(&p, all[static_cast<std::size_t>(r)],
                                              cudaIpcMemLazyEnablePeerAccess));
    const char* touch = std::getenv("IPC_TOUCH_ALL");
    CHECK_CUDA("mutual", cudaMemsetAsync(p, 0, touch != nullptr && touch[0] == '1' ? bytes : 256));
    mapped.push_back(p);
  }
  CHECK_CUDA("mutual", cudaDeviceSynchronize());
  const char done = 1;
  if (!write_all(up, &done, 1)) return 2;
  char bye = 0;
  if (!read_all(down, &bye, 1)) return 2;
  for (void* p : mapped) cudaIpcCloseMemHandle(p);
  cudaFree(mine);
  return 0;
}

int mutual(int world, double mib) {
  std::vector<Exporter> children;
  for (int r = 0; r < world; ++r) {
    children.push_back(
        spawn([&](int up, int down) { return mutual_child(up, down, world, r, mib); }));
    if (children.back().pid < 0) return 2;
  }
  const auto stop = [&](int rc) {
    for (const auto& c : children) kill(c.pid, SIGKILL);
    for (const auto& c : children) waitpid(c.pid, nullptr, 0);
    return rc;
  };
  std::vector<cudaIpcMemHandle_t> all(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r)
    if (!read_all(children[static_cast<std::size_t>(r)].from, &all[static_cast<std::size_t>(r)],
                  sizeof(cudaIpcMemHandle_t)))
      return stop(2);
  std::size_t before = 0, after = 0, total = 0;
  if (cudaMemGetInfo(&before, &total) != cudaSuccess) return stop(2);
  for (const auto& c : children)
    for (const auto& h : all)
      if (!write_all(c.to, &h, sizeof(h))) return stop(2);
  for (const auto& c : children) {
    char done = 0;
    if (!read_all(c.from, &done, 1)) return stop(2);
  }
  if (cudaMemGetInfo(&after, &total) != cudaSuccess) return stop(2);
  std::printf(
      "ipc_mutual world=%d mib=%g lost_kib_per_process=%.1f per_mapping=%.1f\n", world, mib,
      (static_cast<double>(before) - static_cast<double>(after)) / 1024.0 / world,
      (static_cast<double>(before) - static_cast<double>(after)) / 1024.0 / world / (world - 1));
  const char bye = 1;
  for (const auto& c : children)
    if (!write_all(c.to, &bye, 1)) return stop(2);
  int failed = 0;
  for (const auto& c : children) {
    int status = 0;
    waitpid(c.pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 2;
  }
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  epkit::test::gpus_or_exit(1);
  // Every pipe read and wait below is bounded by this: a process that hangs
  // (a CUDA call, a peer gone) ends the run, and its children with it.
  alarm(300);
  if (argc == 4 && std::string(argv[1]) == "mutual") {
    const int world = std::atoi(argv[2]);
    const double mib = std::atof(argv[3]);
    if (world < 2 || world > 64 || !(mib >= 0.001 && mib <= 4096)) {
      std::fprintf(stderr, "mutual WORLD MIB: WORLD 2 to 64, MIB 0.001 to 4096\n");
      return 1;
    }
    return mutual(world, mib);
  }
  const int exporters = argc > 1 ? std::atoi(argv[1]) : 1;
  const int count = argc > 2 ? std::atoi(argv[2]) : 16;
  std::vector<double> mib;
  for (int i = 3; i < argc; ++i) mib.push_back(std::atof(argv[i]));
  if (mib.empty()) mib = {2, 8, 32, 128, 256};
  if (exporters < 1 || exporters > 64 || count < 1 || count > 256) {
    std::fprintf(stderr, "EXPORTERS must be 1 to 64, COUNT 1 to 256\n");
    return 1;
  }
  for (double m : mib)
    if (!(m >= 0.001 && m <= 4096)) {
      std::fprintf(stderr, "each size must be 0.001 to 4096 MiB\n");
      return 1;
    }
  std::vector<Exporter> children;
  for (int e = 0; e < exporters; ++e) {
    children.push_back(spawn([&](int up, int down) { return exporter(up, down, count, mib); }));
    if (children.back().pid < 0) return 2;
  }
  const int rc = importer(children, count, mib);
  // An importer that stopped early never said "done": its exporters would
  // wait for the byte forever.
  if (rc != 0)
    for (const auto& c : children) kill(c.pid, SIGKILL);
  int failed = 0;
  for (const auto& c : children) {
    int status = 0;
    waitpid(c.pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 2;
  }
  return rc != 0 ? rc : failed;
}
