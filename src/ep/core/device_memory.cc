#include "ep/core/device_memory.h"

#include <fmt/format.h>

#include <cstring>
#include <utility>

namespace epkit::ep {

Result<DeviceMemory> DeviceMemory::allocate(std::size_t bytes) {
  DeviceMemory m;
  if (bytes == 0) return m;
  cudaError_t rc = cudaMalloc(&m.m_ptr, bytes);
  if (rc != cudaSuccess) {
    m.m_ptr = nullptr;
    return cuda_error(rc, fmt::format("cudaMalloc({} bytes)", bytes));
  }
  m.m_bytes = bytes;
  return m;
}

DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : m_ptr(std::exchange(other.m_ptr, nullptr)), m_bytes(std::exchange(other.m_bytes, 0)) {}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    if (m_ptr != nullptr) cudaFree(m_ptr);
    m_ptr = std::exchange(other.m_ptr, nullptr);
    m_bytes = std::exchange(other.m_bytes, 0);
  }
  return *this;
}

DeviceMemory::~DeviceMemory() {
  if (m_ptr != nullptr) cudaFree(m_ptr);
}

Result<DeviceTensor> DeviceTensor::uninitialised(DType dtype, std::int64_t rows,
                                                 std::int64_t cols) {
  auto mem = DeviceMemory::allocate(static_cast<std::size_t>(rows * cols) * dtype_size(dtype));
  if (!mem) return mem.error();
  DeviceTensor t;
  t.memory = std::move(*mem);
  t.view = TensorView::matrix(t.memory.get(), dtype, rows, cols);
  return t;
}

Result<DeviceTensor> DeviceTensor::zeros(DType dtype, std::int64_t rows, std::int64_t cols) {
  auto t = uninitialised(dtype, rows, cols);
  if (!t) return t;
  if (t->memory.size() > 0) {
    cudaError_t rc = cudaMemset(t->memory.get(), 0, t->memory.size());
    if (rc != cudaSuccess) return cuda_error(rc, "cudaMemset");
    rc = cudaStreamSynchronize(cudaStreamLegacy);
    if (rc != cudaSuccess) return cuda_error(rc, "cudaStreamSynchronize after cudaMemset");
  }
  return t;
}

Result<DeviceTensor> DeviceTensor::from_host(DType dtype, std::int64_t rows, std::int64_t cols,
                                             const void* host) {
  // Every byte is copied over: no memset (and no second wait) first.
  auto t = uninitialised(dtype, rows, cols);
  if (!t) return t;
  std::size_t bytes = static_cast<std::size_t>(rows * cols) * dtype_size(dtype);
  if (bytes > 0) {
    cudaError_t rc = cudaMemcpy(t->memory.get(), host, bytes, cudaMemcpyHostToDevice);
    if (rc != cudaSuccess) return cuda_error(rc, "cudaMemcpy to the device");
    // From pageable memory the copy may return before its DMA lands.
    rc = cudaStreamSynchronize(cudaStreamLegacy);
    if (rc != cudaSuccess) return cuda_error(rc, "cudaStreamSynchronize after the copy");
  }
  return t;
}

Result<std::vector<std::uint8_t>> to_host(const TensorView& view) {
  std::size_t elem = dtype_size(view.dtype);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(view.numel()) * elem);
  if (out.empty()) return out;
  if (view.data == nullptr) return make_error(ErrorCode::invalid, "to_host: a null view");
  if (view.ndim == 3) {
    // One [d1, d2] matrix at a time (low-latency outputs, per expert).
    const std::size_t slice = out.size() / static_cast<std::size_t>(view.shape[0]);
    for (std::int64_t i = 0; i < view.shape[0]; ++i) {
      TensorView m{static_cast<std::uint8_t*>(view.data) +
                       static_cast<std::size_t>(i * view.strides[0]) * elem,
                   view.dtype,
                   2,
                   {view.shape[1], view.shape[2], 0},
                   {view.strides[1], view.strides[2], 0}};
      auto part = to_host(m);
      if (!part) return part.error();
      std::memcpy(out.data() + static_cast<std::size_t>(i) * slice, part->data(), slice);
    }
    return out;
  }
  cudaError_t rc;
  if (view.ndim == 1 || (view.strides[1] == 1 && view.strides[0] >= view.cols())) {
    // Rows contiguous: one strided 2-D copy.
    std::size_t row_bytes = static_cast<std::size_t>(view.cols()) * elem;
    std::size_t pitch =
        view.ndim == 1 ? row_bytes : static_cast<std::size_t>(view.strides[0]) * elem;
    rc = cudaMemcpy2D(out.data(), row_bytes, view.data, pitch, row_bytes,
                      static_cast<std::size_t>(view.rows()), cudaMemcpyDeviceToHost);
  } else {
    // Any other strides: copy the covering span, then gather on the host.
    std::int64_t last = (view.rows() - 1) * view.strides[0] + (view.cols() - 1) * view.strides[1];
    std::vector<std::uint8_t> span(static_cast<std::size_t>(last + 1) * elem);
    rc = cudaMemcpy(span.data(), view.data, span.size(), cudaMemcpyDeviceToHost);
    if (rc == cudaSuccess) {
      for (std::int64_t i = 0; i < view.rows(); ++i)
        for (std::int64_t j = 0; j < view.cols(); ++j)
          std::memcpy(
              out.data() + static_cast<std::size_t>(i * view.cols() + j) * elem,
              span.data() +
                  static_cast<std::size_t>(i * view.strides[0] + j * view.strides[1]) * elem,
              elem);
    }
  }
  if (rc != cudaSuccess) return cuda_error(rc, "copying " + view.describe() + " to the host");
  return out;
}

}  // namespace epkit::ep
