#include "ep/network_leg/cuda_ipc_mapper.h"

#include <cuda.h>
#include <fmt/format.h>

#include <cstring>
#include <utility>

#include "base/cuda_error.h"

namespace epkit::ep::network_leg {

namespace {

// cuMemGetAddressRange (the driver API) through the runtime's entry point:
// the engine links only the CUDA runtime (docs/architecture.md).
using GetAddressRange = CUresult (*)(CUdeviceptr* base, size_t* size, CUdeviceptr ptr);

// The function's address (a Result of a function pointer trips -Wshadow).
Result<void*> address_range_fn() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
  cudaError_t rc = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 3020,
                                                    cudaEnableDefault, &found);
#else
  cudaError_t rc = cudaGetDriverEntryPoint("cuMemGetAddressRange", &fn, cudaEnableDefault, &found);
#endif
  if (rc != cudaSuccess) return cuda_error(rc, "looking up cuMemGetAddressRange");
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    return make_error(ErrorCode::unavailable, "cuMemGetAddressRange: not in this CUDA driver");
  }
  return fn;
}

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_u64(std::string_view in) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) {
    v |= std::uint64_t{static_cast<unsigned char>(in[static_cast<std::size_t>(i)])} << (8 * i);
  }
  return v;
}

}  // namespace

Result<std::unique_ptr<CudaIpcMapper>> CudaIpcMapper::create() {
  std::unique_ptr<CudaIpcMapper> mapper(new CudaIpcMapper());
  EPKIT_TRY(mapper->init());
  return mapper;
}

Result<void> CudaIpcMapper::init() {
  EPKIT_TRY(cuda_ok(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking),
                    "cudaStreamCreate for the emulated NIC"));
  void* stage = nullptr;
  EPKIT_TRY(
      cuda_ok(cudaHostAlloc(&stage, kStageSlots * sizeof(std::uint64_t), cudaHostAllocDefault),
              "cudaHostAlloc of the signal staging"));
  m_stage = static_cast<std::uint64_t*>(stage);
  for (auto& event : m_chunk_events) {
    EPKIT_TRY(cuda_ok(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"));
  }
  return {};
}

CudaIpcMapper::~CudaIpcMapper() {
  // Copies still queued write into peers' memory and read the staging.
  if (m_stream != nullptr) cudaStreamSynchronize(m_stream);
  for (auto event : m_chunk_events) {
    if (event != nullptr) cudaEventDestroy(event);
  }
  for (const auto& [mark, event] : m_fences) {
    (void)mark;
    cudaEventDestroy(event);
  }
  for (auto event : m_spare_events) cudaEventDestroy(event);
  for (const auto& [handle, mapped] : m_imported) {
    (void)handle;
    cudaIpcCloseMemHandle(mapped);
  }
  for (void* p : m_device) cudaFree(p);
  for (void* p : m_host) cudaFreeHost(p);
  if (m_stage != nullptr) cudaFreeHost(m_stage);
  if (m_stream != nullptr) cudaStreamDestroy(m_stream);
}

Result<void*> CudaIpcMapper::allocate(std::size_t bytes, Placement placement) {
  void* p = nullptr;
  if (placement == Placement::device) {
    EPKIT_TRY(cuda_ok(cudaMalloc(&p, bytes), fmt::format("cudaMalloc of {} bytes", bytes)));
    m_device.push_back(p);
    EPKIT_TRY(cuda_ok(cudaMemset(p, 0, bytes), "cudaMemset"));
    return p;
  }
  EPKIT_TRY(cuda_ok(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable),
                    fmt::format("cudaHostAlloc of {} bytes", bytes)));
  m_host.push_back(p);
  std::memset(p, 0, bytes);
  // The request ring's words are addressed by one pointer on both sides
  // (DeviceLeg): unified addressing makes the device's pointer the host's.
  void* device = nullptr;
  EPKIT_TRY(cuda_ok(cudaHostGetDevicePointer(&device, p, 0), "cudaHostGetDevicePointer"));
  if (device != p) {
    return make_error(ErrorCode::unavailable,
                      "emulated NIC: mapped host memory has another address on the device (no "
                      "unified addressing)");
  }
  return p;
}

Result<std::string> CudaIpcMapper::export_memory(void* base, std::size_t bytes) {
  static const Result<void*> range_fn = address_range_fn();
  if (!range_fn) return range_fn.error();
  const auto get_range = reinterpret_cast<GetAddressRange>(range_fn.value());
  CUdeviceptr start = 0;
  size_t size = 0;
  if (const CUresult rc = get_range(&start, &size, reinterpret_cast<CUdeviceptr>(base));
      rc != CUDA_SUCCESS) {
    return make_error(ErrorCode::cuda,
                      fmt::format("cuMemGetAddressRange of {} failed ({}): not device memory "
                                  "from cudaMalloc?",
                                  base, static_cast<int>(rc)));
  }
  const auto offset = reinterpret_cast<CUdeviceptr>(base) - start;
  if (offset + bytes > size) {
    return make_error(ErrorCode::invalid,
                      fmt::format("emulated NIC: {} bytes at {} run past their allocation ({} "
                                  "bytes from offset {})",
                                  bytes, base, size, offset));
  }
  cudaIpcMemHandle_t handle;
  EPKIT_TRY(
      cuda_ok(cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(start)), "cudaIpcGetMemHandle"));
  std::string out(reinterpret_cast<const char*>(&handle), sizeof(handle));
  put_u64(out, offset);
  return out;
}

Result<void*> CudaIpcMapper::import_memory(int rank, std::string_view handle, std::size_t) {
  if (handle.size() != handle_bytes()) {
    return make_error(ErrorCode::invalid,
                      fmt::format("rank {} sent a {}-byte CUDA IPC handle ({} expected)", rank,
                                  handle.size(), handle_bytes()));
  }
  const auto ipc = handle.substr(0, sizeof(cudaIpcMemHandle_t));
  const auto offset = get_u64(handle.substr(sizeof(cudaIpcMemHandle_t)));
  auto it = m_imported.find(ipc);
  if (it == m_imported.end()) {
    cudaIpcMemHandle_t peer;
    std::memcpy(&peer, ipc.data(), sizeof(peer));
    void* mapped = nullptr;
    EPKIT_TRY(cuda_ok(cudaIpcOpenMemHandle(&mapped, peer, cudaIpcMemLazyEnablePeerAccess),
                      fmt::format("mapping rank {}'s memory through CUDA IPC", rank)));
    it = m_imported.emplace(std::string(ipc), mapped).first;
  }
  // The allocation's size is not known here; the descriptor's window size
  // bounds every put, and the exporter checked it against the allocation.
  return static_cast<std::uint8_t*>(it->second) + offset;
}

Result<void> CudaIpcMapper::copy(void* dst, const void* src, std::size_t bytes) {
  return cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, m_stream),
                 "cudaMemcpyAsync of a put");
}

Result<void> CudaIpcMapper::write_u64(std::uint64_t* dst, std::uint64_t value) {
  const std::size_t slot = m_next_stage % kStageSlots;
  const std::size_t chunk = slot / kChunk;
  if (slot % kChunk == 0 && m_chunk_recorded[chunk]) {
    // The chunk's copies of one lap ago must have read their values.
    EPKIT_TRY(cuda_ok(cudaEventSynchronize(m_chunk_events[chunk]), "cudaEventSynchronize"));
    m_chunk_recorded[chunk] = false;
  }
  m_stage[slot] = value;
  // On the NIC's stream after the put's bytes, so a waiter that sees the
  // value sees them.
  EPKIT_TRY(
      cuda_ok(cudaMemcpyAsync(dst, &m_stage[slot], sizeof(value), cudaMemcpyDefault, m_stream),
              "cudaMemcpyAsync of a signal"));
  ++m_next_stage;
  if (slot % kChunk == kChunk - 1) {
    EPKIT_TRY(cuda_ok(cudaEventRecord(m_chunk_events[chunk], m_stream), "cudaEventRecord"));
    m_chunk_recorded[chunk] = true;
  }
  return {};
}

Result<std::uint64_t> CudaIpcMapper::fence() {
  cudaEvent_t event = nullptr;
  if (!m_spare_events.empty()) {
    event = m_spare_events.back();
    m_spare_events.pop_back();
  } else {
    EPKIT_TRY(cuda_ok(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                      "cudaEventCreate for a fence"));
  }
  if (auto recorded = cuda_ok(cudaEventRecord(event, m_stream), "cudaEventRecord of a fence");
      !recorded.ok()) {
    m_spare_events.push_back(event);
    return recorded.error();
  }
  m_fences.emplace_back(++m_next_mark, event);
  return m_next_mark;
}

Result<std::uint64_t> CudaIpcMapper::completed() {
  // Events on one stream complete in order: stop at the first still queued.
  while (!m_fences.empty()) {
    const cudaError_t rc = cudaEventQuery(m_fences.front().second);
    if (rc == cudaErrorNotReady) break;
    if (rc != cudaSuccess) return cuda_error(rc, "cudaEventQuery of a fence");
    m_completed_mark = m_fences.front().first;
    m_spare_events.push_back(m_fences.front().second);
    m_fences.pop_front();
  }
  return m_completed_mark;
}

}  // namespace epkit::ep::network_leg
