// The network leg (ep/network_leg/) on a GPU: one process per rank, ranks
// sharing the GPU (faked nodes), each with its own emulated NIC (a host
// thread calling the backend's progress) over CUDA IPC. Every rank streams
// messages to every peer through a ring of slots in the peer's window with
// credits back (network_leg_ring.cu), and checks every word it receives.
//
// Modes:
//   ring   every message lands bitwise; the achieved rate per NIC against
//          the emulated cap, and the host time of the launch;
//   kill   the last rank stops mid-stream and is killed (SIGKILL): every
//          survivor's kernel names it within the timeout;
//   drop   every rank's NIC drops the last rank mid-stream (the emulator's
//          fault injection): every survivor names it, kernel and backend.
// Usage: epkit_network_leg RANKS [key=value ...]
//   mode=ring|kill|drop moves=producer|host bytes=65536 slots=8 messages=256 gbps=20
//   latency_us=5 jitter_us=0 timeout_s=5
// Prints one line per rank ("network_leg rank=..."); exit 0 when every rank
// did what its mode expects.
#include <cuda_runtime_api.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ep/network_leg/cuda_ipc_mapper.h"
#include "ep/network_leg/emulated_backend.h"
#include "ep_harness/store_bootstrap.h"
#include "forked_ranks.h"
#include "network_leg_ring.h"

using namespace epkit;
using namespace std::chrono_literals;
namespace nl = epkit::ep::network_leg;

namespace {

struct Options {
  std::string mode = "ring";
  std::string moves = "producer";  // or "host": the host's copy engine moves the bytes
  std::uint32_t bytes = 65536, slots = 8, messages = 256;
  double gbps = 20, latency_us = 5, jitter_us = 0, timeout_s = 5;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto eq = arg.find('=');
    if (eq == std::string::npos) return false;
    const std::string key = arg.substr(0, eq);
    const std::string value = arg.substr(eq + 1);
    char* end = nullptr;
    const double number = std::strtod(value.c_str(), &end);
    // Bounded before any cast: a count past these is a typo, not a test.
    const bool numeric = end != value.c_str() && *end == '\0' && number >= 0 && number <= 1e9;
    if (key == "mode") {
      o.mode = value;
    } else if (key == "moves") {
      o.moves = value;
    } else if (!numeric) {
      return false;
    } else if (key == "bytes") {
      o.bytes = static_cast<std::uint32_t>(number);
    } else if (key == "slots") {
      o.slots = static_cast<std::uint32_t>(number);
    } else if (key == "messages") {
      o.messages = static_cast<std::uint32_t>(number);
    } else if (key == "gbps") {
      o.gbps = number;
    } else if (key == "latency_us") {
      o.latency_us = number;
    } else if (key == "jitter_us") {
      o.jitter_us = number;
    } else if (key == "timeout_s") {
      o.timeout_s = number;
    } else {
      return false;
    }
  }
  return (o.moves == "producer" || o.moves == "host") &&
         (o.mode == "ring" || o.mode == "kill" || o.mode == "drop") && o.bytes >= 16 &&
         o.bytes <= (1u << 30) && o.bytes % 16 == 0 && o.slots >= 1 && o.slots <= 4096 &&
         o.messages >= 1 && o.gbps > 0 && o.timeout_s > 0 && o.timeout_s <= 3600;
}

const char* status_name(std::uint32_t s) {
  switch (s) {
    case test::ring_ok:
      return "ok";
    case test::ring_wait_expired:
      return "wait expired";
    case test::ring_post_failed:
      return "post failed";
    case test::ring_flush_expired:
      return "flush expired";
  }
  return "?";
}

int rank_main(int rank, int ranks, int gpus, std::uint16_t port, const Options& o) {
  CHECK_CUDA(cudaSetDevice(rank % gpus));
  auto session = test::join_forked_store(rank, ranks, port, "network-leg");
  if (!session) {
    std::fprintf(stderr, "rank %d: store: %s\n", rank, session.error().message.c_str());
    return 2;
  }
  harness::StoreBootstrap boot(session->store, rank, ranks, "leg", 30s);
  const int victim = ranks - 1;
  const bool dies = o.mode == "kill" && rank == victim;

  nl::EmulatedNicOptions nic;
  nic.pacing.bytes_per_s = o.gbps * 1e9;
  nic.pacing.latency_ns = static_cast<std::int64_t>(o.latency_us * 1e3);
  nic.pacing.reorder_jitter_ns = static_cast<std::int64_t>(o.jitter_us * 1e3);
  nic.pacing.seed = static_cast<std::uint64_t>(rank) + 1;
  nic.num_signals = test::ring_signals(ranks, o.slots);
  nic.timeout_s = o.timeout_s;
  nic.producer_moves = o.moves == "producer";
  auto mapper = nl::CudaIpcMapper::create();
  CHECK_OK(mapper);
  auto backend = nl::EmulatedBackend::create(nic, std::move(mapper).value());
  CHECK_OK(backend);
  auto& leg = *backend.value();

  const std::size_t window = static_cast<std::size_t>(ranks) * o.slots * o.bytes;
  void* send = nullptr;
  void* recv = nullptr;
  CHECK_CUDA(cudaMalloc(&send, window));
  CHECK_CUDA(cudaMalloc(&recv, window));
  CHECK_CUDA(cudaMemset(recv, 0, window));
  CHECK_OK(leg.register_window(send, window));
  CHECK_OK(leg.register_window(recv, window));
  CHECK_OK(leg.exchange(boot));

  test::RingReport* reports = nullptr;
  CHECK_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&reports),
                           sizeof(test::RingReport) * 2 * static_cast<std::size_t>(ranks),
                           cudaHostAllocMapped));
  for (int b = 0; b < 2 * ranks; ++b) reports[b] = test::RingReport{};

  test::RingArgs args;
  args.leg = leg.device_leg();
  args.send = static_cast<std::uint8_t*>(send);
  args.recv = static_cast<const std::uint8_t*>(recv);
  args.bytes = o.bytes;
  args.slots = o.slots;
  args.messages = o.messages;
  if (dies) args.stop_after = o.messages / 4;
  args.timeout_ns = static_cast<std::int64_t>(o.timeout_s * 1e9);
  args.reports = reports;

  // The rank's NIC: progress until told to stop or the backend faults.
  std::atomic<bool> stop{false};
  std::string progress_error;
  std::thread nic_thread([&] {
    while (!stop.load(std::memory_order_acquire)) {
      if (auto step = leg.progress(); !step.ok()) {
        progress_error = step.error().message;
        return;
      }
    }
  });

  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, end = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&end));
  // Every rank's kernel waits on its peers': start them together.
  CHECK_OK(boot.all_gather("ready"));
  CHECK_CUDA(cudaEventRecord(start, stream));
  const auto launch_begin = std::chrono::steady_clock::now();
  CHECK_CUDA(test::launch_ring(args, stream));
  const double launch_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - launch_begin)
          .count();
  CHECK_CUDA(cudaEventRecord(end, stream));

  if (o.mode == "drop") {
    // Mid-stream: a quarter of the messages at the cap.
    const double stream_s =
        static_cast<double>(o.messages) * o.bytes * (ranks - 1) / (o.gbps * 1e9);
    std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.001, stream_s / 4)));
    CHECK_OK(leg.drop_rank(victim));
  }
  // Bounded: every wait in the kernel is; this one is their sum and some.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(4 * o.timeout_s + 30);
  cudaError_t rc = cudaErrorNotReady;
  while ((rc = cudaEventQuery(end)) == cudaErrorNotReady &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(200us);
  }
  if (rc != cudaSuccess) {
    std::fprintf(
        stderr, "rank %d: the ring kernel did not finish: %s\n", rank,
        rc == cudaErrorNotReady ? "still running past every timeout" : cudaGetErrorString(rc));
    std::fflush(stderr);
    ::_exit(3);  // a kernel still running cannot be cleaned up
  }
  if (dies) {
    // Dies mid-transfer: no cleanup, no goodbye to the peers.
    std::printf("network_leg rank=%d stopped after %u messages and kills itself\n", rank,
                args.stop_after);
    std::fflush(stdout);
    ::kill(::getpid(), SIGKILL);
  }
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, end));
  stop.store(true, std::memory_order_release);
  nic_thread.join();

  // What this rank saw.
  std::uint64_t errors = 0, sent = 0, checked = 0;
  std::map<int, int> blamed;  // peer -> blocks naming it
  bool other_failure = false;
  int flush_expired = 0;  // blocks; the backend names whom for
  for (int b = 0; b < 2 * ranks; ++b) {
    const auto& r = reports[b];
    errors += r.errors;
    (b < ranks ? sent : checked) += r.messages;
    if (r.status == test::ring_ok) continue;
    if (r.status == test::ring_wait_expired) {
      ++blamed[r.blamed];
    } else if (r.status == test::ring_flush_expired) {
      ++flush_expired;
    } else {
      other_failure = true;
      std::fprintf(stderr, "rank %d: block %d: %s\n", rank, b, status_name(r.status));
    }
  }
  const auto fault = leg.fault();
  const double bytes_out = static_cast<double>(sent) * o.bytes;
  const double gbps = ms > 0 ? bytes_out / (ms * 1e-3) / 1e9 : 0;
  std::string names;
  for (const auto& [peer, blocks] : blamed) names += " " + std::to_string(peer);
  std::printf(
      "network_leg rank=%d mode=%s moves=%s ranks=%d bytes=%u slots=%u messages=%u cap_gbps=%g "
      "time_ms=%.3f gbps=%.2f launch_us=%.1f sent=%llu checked=%llu errors=%llu named=[%s ] "
      "flush_expired=%d backend_fault=%s\n",
      rank, o.mode.c_str(), o.moves.c_str(), ranks, o.bytes, o.slots, o.messages, o.gbps, ms, gbps,
      launch_us, static_cast<unsigned long long>(sent), static_cast<unsigned long long>(checked),
      static_cast<unsigned long long>(errors), names.c_str(), flush_expired,
      fault ? (std::to_string(fault->rank) + " (" + fault->reason + ")").c_str() : "none");
  if (!progress_error.empty() && o.mode == "ring") {
    std::fprintf(stderr, "rank %d: progress: %s\n", rank, progress_error.c_str());
    return 1;
  }
  if (errors > 0 || other_failure) return 1;
  if (o.mode == "ring") {
    const std::uint64_t want = static_cast<std::uint64_t>(o.messages) * (ranks - 1);
    return blamed.empty() && flush_expired == 0 && sent == want && checked == want ? 0 : 1;
  }
  // kill / drop: this survivor names the victim and nobody else.
  const bool named = blamed.size() == 1 && blamed.begin()->first == victim;
  // A backend reports a drop only when it has a put for the dropped rank
  // after the drop; one whose puts all landed before has nothing to report
  // (seen on the H200: rank 1 sent its 288 puts, then named rank 2 waiting).
  // What it reports must name the victim.
  const bool backend_named =
      o.mode != "drop" || rank == victim || !fault || fault->rank == victim;
  if (rank == victim) return 0;  // drop: the victim's view is not asked
  if (!named || !backend_named) {
    std::fprintf(stderr, "rank %d: expected rank %d named, got [%s ] and backend %s\n", rank,
                 victim, names.c_str(), fault ? std::to_string(fault->rank).c_str() : "none");
    return 1;
  }
  // The survivor exits without tearing down what the dead rank mapped.
  std::fflush(stdout);
  ::_exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  Options o;
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 0;
  if (ranks < 2 || ranks > 64 || !parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: epkit_network_leg RANKS(2-64) [mode=ring|kill|drop moves=producer|host "
                 "bytes=N(x16) slots=N "
                 "messages=N gbps=G latency_us=U jitter_us=U timeout_s=S]\n");
    return 1;
  }
  const int gpus = test::gpus_or_exit(1);
  if (gpus < ranks)
    std::printf("note: %d ranks share %d GPU(s); start MPS so that their kernels run at once\n",
                ranks, gpus);
  const std::uint16_t port = test::free_local_port();
  const auto codes = test::wait_ranks(
      test::fork_ranks(ranks, [&](int r) { return rank_main(r, ranks, gpus, port, o); }));
  int worst = 0;
  for (int r = 0; r < ranks; ++r) {
    const int code = codes[static_cast<std::size_t>(r)];
    // kill: the victim ends itself with SIGKILL, which is the point.
    if (o.mode == "kill" && r == ranks - 1 && code == 128 + SIGKILL) continue;
    worst = std::max(worst, code);
  }
  std::printf("network_leg: %s, exit %d\n", o.mode.c_str(), worst);
  return worst;
}
