// What every mode's Buffer shares (ep/core/buffer_parts.h): argument
// checks and the communication stream that handles free their arrays on.
#include "ep/core/buffer_parts.h"

#include <fmt/format.h>

#include <cstdint>

namespace epkit::ep {

Error invalid(std::string message) {
  return make_error(ErrorCode::invalid, std::move(message));
}

bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

bool given(const TensorView& v) {
  return v.data != nullptr || (v.ndim == 2 && v.shape[1] > 0);
}

Result<void> check_rows(const TensorView& v, const char* name, DType dtype) {
  if (!given(v)) return invalid(fmt::format("{} is missing", name));
  if (v.data == nullptr && v.rows() != 0)
    return invalid(fmt::format("{} has rows but no memory", name));
  if (v.dtype != dtype)
    return invalid(fmt::format("{} is {}, expected {}", name, v.describe(), to_string(dtype)));
  if (v.ndim != 2 || v.strides[1] != 1 || v.strides[0] < v.shape[1])
    return invalid(fmt::format("{} ({}) must be a row-major matrix (strides {}, {})", name,
                               v.describe(), v.strides[0], v.strides[1]));
  if (v.rows() == 0) return {};
  if (!aligned16(v.data) || (v.strides[0] * static_cast<std::int64_t>(dtype_size(dtype))) % 16 != 0)
    return invalid(fmt::format("{} rows must start on 16-byte boundaries", name));
  return {};
}

Stream::~Stream() {
  for (void* p : m_deferred) cudaFree(p);
  if (stream != nullptr) cudaStreamDestroy(stream);
}

namespace {
bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) != cudaSuccess ||
         status != cudaStreamCaptureStatusNone;
}
}  // namespace

void Stream::free_later(void* memory) {
  if (!capturing(stream)) {
    cudaFreeAsync(memory, stream);
    return;
  }
  std::lock_guard<std::mutex> lock(m_mutex);
  m_deferred.push_back(memory);
}

void Stream::drain() {
  std::vector<void*> ready;
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    if (m_deferred.empty() || capturing(stream)) return;
    ready.swap(m_deferred);
  }
  for (void* p : ready) cudaFreeAsync(p, stream);
}

}  // namespace epkit::ep
