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

#include "base/cuda_error.h"
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
  EPKIT_TRY(cuda_ok(
      cudaMemcpy(reduce.ptr, values.data(), k_count * sizeof(float), cudaMemcpyHostToDevice),
      "cudaMemcpy"));
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
  EPKIT_TRY(cuda_ok(
      cudaMemcpy(send.ptr, payload.data(), k_count * sizeof(std::int32_t), cudaMemcpyHostToDevice),
      "cudaMemcpy"));
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

#endif

}  // namespace epkit::runtime
