#include "runtime/connectivity.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <utility>
#include <vector>

#ifdef EPKIT_WITH_CUDA
#include <cuda_runtime_api.h>

#include <csignal>
#include <memory>

#include "base/cuda_error.h"
#include "runtime/connectivity_result.h"
#endif

namespace epkit::runtime {

// The file is made by mkstemp under $TMPDIR: a name another user could guess
// would let them plant a link there for NCCL to write through. NCCL reads its
// settings from the process environment, so they are set there
// (host::set_process_env).
std::string capture_nccl_log(const host::Host& host, int rank) {
  if (host.env().has("NCCL_DEBUG")) return {};
  auto made = host::make_temp_file(host.env(), fmt::format("epkit-nccl-{}-{}-", ::getpid(), rank));
  if (!made) return {};  // transports then show as unknown
  const std::string& path = *made;
  for (const auto& [name, value] : {std::pair<const char*, std::string>{"NCCL_DEBUG", "INFO"},
                                    {"NCCL_DEBUG_SUBSYS", "INIT,P2P,NET"},
                                    {"NCCL_DEBUG_FILE", path}}) {
    if (!host::set_process_env(name, value)) {
      std::remove(path.c_str());
      return {};  // transports then show as unknown
    }
  }
  return path;
}

PeerTransports read_nccl_transports(const std::string& log_path) {
  if (log_path.empty()) return {};
  std::string text;
  {
    std::ifstream in(log_path, std::ios::binary);
    text.resize(k_max_nccl_log_bytes);
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<std::size_t>(in.gcount()));
  }
  std::remove(log_path.c_str());
  return parse_transports(text);
}

#ifdef EPKIT_WITH_CUDA

namespace {

constexpr std::size_t k_count = k_connectivity_count;

// Device memory owned for the life of the test.
struct DeviceBuffer {
  void* ptr = nullptr;
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};

std::int32_t ring_value(int rank, std::size_t i) {
  return static_cast<std::int32_t>((static_cast<std::size_t>(rank) * 1000003u + i) & 0x7fffffff);
}

}  // namespace

Result<ConnectivityResult> run_connectivity(GpuRank& r, double timeout_s) {
  auto& s = *r.session;
  const auto& api = s.api();
  const int n = s.world_size();
  const int me = s.rank();
  ConnectivityResult out;
  DeviceBuffer reduce;
  DeviceBuffer send;
  DeviceBuffer recv;
  EPKIT_TRY(cuda_ok(cudaMalloc(&reduce.ptr, k_count * sizeof(float)), "cudaMalloc"));
  EPKIT_TRY(cuda_ok(cudaMalloc(&send.ptr, k_count * sizeof(std::int32_t)), "cudaMalloc"));
  EPKIT_TRY(cuda_ok(cudaMalloc(&recv.ptr, k_count * sizeof(std::int32_t)), "cudaMalloc"));

  // All-reduce of rank + 1 everywhere: every element must be n(n+1)/2
  // (exact in float for any realistic world size).
  std::vector<float> values(k_count, static_cast<float>(me + 1));
  // On NCCL's stream: a cudaMemcpy from pageable memory may return before
  // its DMA lands, and that stream does not wait for the legacy one.
  EPKIT_TRY(cuda_ok(cudaMemcpyAsync(reduce.ptr, values.data(), k_count * sizeof(float),
                                    cudaMemcpyHostToDevice, s.stream()),
                    "cudaMemcpyAsync"));
  EPKIT_TRY(s.check(
      api.all_reduce(reduce.ptr, reduce.ptr, k_count, ncclFloat32, ncclSum, s.comm(), s.stream()),
      "ncclAllReduce"));
  EPKIT_TRY(s.wait("all_reduce", Deadline::after_seconds(timeout_s)));
  EPKIT_TRY(cuda_ok(
      cudaMemcpy(values.data(), reduce.ptr, k_count * sizeof(float), cudaMemcpyDeviceToHost),
      "cudaMemcpy"));
  const float expect = static_cast<float>(n) * static_cast<float>(n + 1) / 2.0f;
  for (float v : values) out.wrong_allreduce += v != expect ? 1 : 0;

  // Ring: send to the next rank, receive from the previous one.
  std::vector<std::int32_t> payload(k_count);
  for (std::size_t i = 0; i < k_count; ++i) payload[i] = ring_value(me, i);
  EPKIT_TRY(cuda_ok(cudaMemcpyAsync(send.ptr, payload.data(), k_count * sizeof(std::int32_t),
                                    cudaMemcpyHostToDevice, s.stream()),
                    "cudaMemcpyAsync"));
  const int next = (me + 1) % n;
  const int prev = (me + n - 1) % n;
  EPKIT_TRY(s.check(api.group_start(), "ncclGroupStart"));
  auto sent =
      s.check(api.send(send.ptr, k_count, ncclInt32, next, s.comm(), s.stream()), "ncclSend");
  auto got =
      s.check(api.recv(recv.ptr, k_count, ncclInt32, prev, s.comm(), s.stream()), "ncclRecv");
  EPKIT_TRY(s.check(api.group_end(), "ncclGroupEnd"));
  EPKIT_TRY(sent);
  EPKIT_TRY(got);
  EPKIT_TRY(s.wait("ring", Deadline::after_seconds(timeout_s)));
  EPKIT_TRY(cuda_ok(
      cudaMemcpy(payload.data(), recv.ptr, k_count * sizeof(std::int32_t), cudaMemcpyDeviceToHost),
      "cudaMemcpy"));
  for (std::size_t i = 0; i < k_count; ++i) out.wrong_ring += payload[i] != ring_value(prev, i);

  if (out.wrong_allreduce != 0 || out.wrong_ring != 0) {
    out.ok = false;
    std::vector<std::string> parts;
    if (out.wrong_allreduce != 0) {
      parts.push_back(fmt::format("all-reduce: {} of {} values differ from {}", out.wrong_allreduce,
                                  k_count, expect));
    }
    if (out.wrong_ring != 0) {
      parts.push_back(fmt::format("ring recv from {}: {} of {} values wrong", s.label(prev),
                                  out.wrong_ring, k_count));
    }
    out.reason = fmt::format("{}", fmt::join(parts, "; "));
  }
  EPKIT_TRY(r.store().barrier("test/barrier", Deadline::after_seconds(timeout_s)));
  return out;
}

namespace {

nlohmann::json transports_json(const PeerTransports& transports) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [peers, transport] : transports) {
    out.push_back({{"from", peers.first}, {"to", peers.second}, {"transport", transport}});
  }
  return out;
}

std::string cc_text(const GpuInfo& g) {
  return fmt::format("{}.{}", g.cc_major, g.cc_minor);
}

}  // namespace

int run_connectivity_rank(const host::Host& host, const LaunchInfo& launch, RankIo& io,
                          double timeout_s,
                          const std::function<void(const ConnectivitySummary&)>& write_summary) {
  auto fail = [&](int code, const std::string& why) {
    io.line("FAIL: " + why);
    return code;
  };
  // Before NCCL loads: it reads NCCL_DEBUG* once.
  const std::string log_path = capture_nccl_log(host, launch.rank);
  auto step = [&] { return Deadline::after_seconds(timeout_s); };
  std::unique_ptr<GpuRank> joined;
  if (int rc = open_gpu_rank(host, launch, io, timeout_s, joined); rc != k_gpu_ok) return rc;
  auto& r = *joined;
  auto mismatches = compare_facts(r.facts);
  // Fault injection for the tests: this rank dies after NCCL started, the
  // others must name it and exit instead of hanging in the collectives.
  if (auto kill = host.env().get_nonempty("EPKIT_TEST_KILL_RANK");
      kill && *kill == std::to_string(launch.rank)) {
    std::raise(SIGKILL);
  }
  auto result = run_connectivity(r, timeout_s);
  if (!result) {
    r.session->abort();
    return fail(exit_code_for(result.error()), result.error().message);
  }
  nlohmann::json mine = {{"rank", launch.rank},
                         {"label", r.labels[static_cast<std::size_t>(launch.rank)]},
                         {"ok", result->ok},
                         {"reason", result->reason},
                         {"gpu_name", r.gpu.name},
                         {"gpu_uuid", r.gpu.uuid},
                         {"gpu_pci_bus_id", r.gpu.pci_bus_id},
                         {"compute_capability", cc_text(r.gpu)},
                         {"wrong_all_reduce", result->wrong_allreduce},
                         {"wrong_ring", result->wrong_ring},
                         {"transports", transports_json(read_nccl_transports(log_path))}};
  auto set =
      r.store().set(fmt::format("test/result/{}", launch.rank),
                    mine.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), step());
  if (!set) return fail(exit_code_for(set.error()), set.error().message);
  int code = result->ok ? k_gpu_ok : k_gpu_wrong_data;
  if (launch.rank == 0) {
    ConnectivitySummary summary{r, {}, std::move(mismatches), !log_path.empty()};
    for (int q = 0; q < launch.world_size; ++q) {
      auto text = r.store().get(fmt::format("test/result/{}", q), step());
      if (!text) return fail(exit_code_for(text.error()), text.error().message);
      // Another process's JSON: only checked fields of checked types reach
      // the summary (a malformed one is a failed rank, named).
      summary.results.push_back(checked_connectivity_result(*text, q));
    }
    if (write_summary) write_summary(summary);
  }
  // Everyone waits for rank 0's summary before leaving: a rank that leaves
  // early looks like a crash to the store.
  code = close_gpu_rank(r, io, "test/done", timeout_s, code);
  if (code == k_gpu_ok) {
    io.line("OK");
  } else if (!result->ok) {
    io.line("FAIL: " + result->reason);
  }
  return code;
}

#endif

}  // namespace epkit::runtime
