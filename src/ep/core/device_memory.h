// Owned device memory and a tensor view over it: what the engine's handles,
// the reference path, the conformance suite and the benchmark allocate.
#pragma once

#include <epkit/ep.h>
#include <epkit/result.h>

#include <cstddef>
#include <string>
#include <vector>

#include "base/cuda_error.h"

namespace epkit::ep {

/// cudaMalloc'd bytes, freed on destruction (move-only).
class DeviceMemory {
 public:
  DeviceMemory() = default;
  static Result<DeviceMemory> allocate(std::size_t bytes);
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory();

  void* get() const { return m_ptr; }
  std::size_t size() const { return m_bytes; }

 private:
  void* m_ptr = nullptr;
  std::size_t m_bytes = 0;
};

/// A row-major device tensor that owns its memory.
struct DeviceTensor {
  DeviceMemory memory;
  TensorView view;

  /// Contents undefined: for memory that stream work fills.
  static Result<DeviceTensor> uninitialised(DType dtype, std::int64_t rows, std::int64_t cols);
  /// zeros and from_host return once the bytes are on the device (they
  /// synchronise the legacy stream, which a non-blocking stream does not
  /// wait for), so work on any stream may read them.
  static Result<DeviceTensor> zeros(DType dtype, std::int64_t rows, std::int64_t cols);
  static Result<DeviceTensor> from_host(DType dtype, std::int64_t rows, std::int64_t cols,
                                        const void* host);
};

/// Copies a view (any strides, rank 1 to 3) to host memory, row-major and
/// densely packed: numel() * dtype_size bytes. Synchronous.
Result<std::vector<std::uint8_t>> to_host(const TensorView& view);

}  // namespace epkit::ep
