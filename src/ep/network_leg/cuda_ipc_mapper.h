// The emulated NIC's MemoryMapper for rank processes on one GPU (faked
// nodes): windows and signal arrays travel as CUDA IPC handles
// (cudaIpcGetMemHandle / cudaIpcOpenMemHandle, as the intranode Buffer maps
// its peers' heaps, ep/intranode/buffer.cc), and the NIC's bytes move with
// cudaMemcpyAsync on a stream of the NIC's own, each signal written after
// its put's bytes by an 8-byte copy on the same stream.
//
// The emulated backend's CPU tests use InProcessMapper (emulated_backend.h)
// instead; this one runs on a GPU in tests/gpu/network_leg.cc.
#pragma once

#include <cuda_runtime_api.h>
#include <epkit/result.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ep/network_leg/emulated_backend.h"

namespace epkit::ep::network_leg {

class CudaIpcMapper final : public MemoryMapper {
 public:
  /// On the current device: the NIC's stream and the staging for signal
  /// values.
  static Result<std::unique_ptr<CudaIpcMapper>> create();
  ~CudaIpcMapper() override;
  CudaIpcMapper(const CudaIpcMapper&) = delete;
  CudaIpcMapper& operator=(const CudaIpcMapper&) = delete;

  std::string describe() const override { return "CUDA IPC"; }
  /// A cudaIpcMemHandle_t, then the range's offset in its allocation (u64):
  /// a handle names a whole allocation, and a window may start inside one.
  std::size_t handle_bytes() const override { return sizeof(cudaIpcMemHandle_t) + 8; }
  Result<void*> allocate(std::size_t bytes, Placement placement) override;
  Result<std::string> export_memory(void* base, std::size_t bytes) override;
  Result<void*> import_memory(int rank, std::string_view handle, std::size_t bytes) override;
  Result<void> copy(void* dst, const void* src, std::size_t bytes) override;
  Result<void> write_u64(std::uint64_t* dst, std::uint64_t value) override;
  /// An event recorded on the NIC's stream; completed() queries them in
  /// order (never blocks).
  Result<std::uint64_t> fence() override;
  Result<std::uint64_t> completed() override;

 private:
  // Signal values wait in pinned host memory until their copy has read
  // them: a ring of slots in chunks, each chunk's last copy followed by an
  // event, which is waited for before the chunk is written again.
  static constexpr std::size_t kStageSlots = 4096;
  static constexpr std::size_t kChunk = 512;
  static constexpr std::size_t kChunks = kStageSlots / kChunk;

  CudaIpcMapper() = default;
  Result<void> init();

  cudaStream_t m_stream = nullptr;
  std::uint64_t* m_stage = nullptr;
  std::array<cudaEvent_t, kChunks> m_chunk_events{};
  std::array<bool, kChunks> m_chunk_recorded{};
  std::uint64_t m_next_stage = 0;
  // Fences: events recorded and not yet seen complete, oldest first, by
  // mark; finished events are reused.
  std::deque<std::pair<std::uint64_t, cudaEvent_t>> m_fences;
  std::vector<cudaEvent_t> m_spare_events;
  std::uint64_t m_next_mark = 0;
  std::uint64_t m_completed_mark = 0;
  std::vector<void*> m_device;  // cudaMalloc'd
  std::vector<void*> m_host;    // cudaHostAlloc'd
  // Peers' allocations by their IPC handle's bytes, each opened once: two
  // windows inside one allocation share a mapping.
  std::map<std::string, void*, std::less<>> m_imported;
};

}  // namespace epkit::ep::network_leg
