// TensorView, DType, Event and Config: the small value types of the public
// EP API.
#include <epkit/ep.h>
#include <fmt/format.h>

#include <utility>

namespace epkit::ep {

std::size_t dtype_size(DType type) {
  switch (type) {
    case DType::bf16:
      return 2;
    case DType::fp8_e4m3:
      return 1;
    case DType::fp32:
      return 4;
    case DType::int32:
      return 4;
    case DType::int64:
      return 8;
    case DType::boolean:
      return 1;
  }
  return 0;
}

const char* to_string(DType type) {
  switch (type) {
    case DType::bf16:
      return "bf16";
    case DType::fp8_e4m3:
      return "fp8_e4m3";
    case DType::fp32:
      return "fp32";
    case DType::int32:
      return "int32";
    case DType::int64:
      return "int64";
    case DType::boolean:
      return "bool";
  }
  return "?";
}

TensorView TensorView::matrix(void* data, DType dtype, std::int64_t rows, std::int64_t cols) {
  return TensorView{data, dtype, 2, {rows, cols}, {cols, 1}};
}

TensorView TensorView::column_major(void* data, DType dtype, std::int64_t rows, std::int64_t cols) {
  return TensorView{data, dtype, 2, {rows, cols}, {1, rows}};
}

TensorView TensorView::vector(void* data, DType dtype, std::int64_t size) {
  return TensorView{data, dtype, 1, {size, 0, 0}, {1, 0, 0}};
}

TensorView TensorView::tensor3(void* data, DType dtype, std::int64_t d0, std::int64_t d1,
                               std::int64_t d2) {
  return TensorView{data, dtype, 3, {d0, d1, d2}, {d1 * d2, d2, 1}};
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < ndim && i < 3; ++i) n *= shape[static_cast<std::size_t>(i)];
  return n;
}

std::string TensorView::describe() const {
  if (ndim == 1) return fmt::format("{}[{}]", to_string(dtype), shape[0]);
  if (ndim == 3)
    return fmt::format("{}[{}, {}, {}]", to_string(dtype), shape[0], shape[1], shape[2]);
  return fmt::format("{}[{}, {}]", to_string(dtype), shape[0], shape[1]);
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (m_event != nullptr) cudaEventDestroy(m_event);
    m_event = std::exchange(other.m_event, nullptr);
  }
  return *this;
}

Event::~Event() {
  if (m_event != nullptr) cudaEventDestroy(m_event);
}

Result<void> Event::wait_on(cudaStream_t stream) const {
  if (m_event == nullptr) return {};
  cudaError_t rc = cudaStreamWaitEvent(stream, m_event, 0);
  if (rc != cudaSuccess)
    return make_error(ErrorCode::cuda,
                      fmt::format("cudaStreamWaitEvent: {}", cudaGetErrorString(rc)));
  return {};
}

Result<void> Event::synchronize() const {
  if (m_event == nullptr) return {};
  cudaError_t rc = cudaEventSynchronize(m_event);
  if (rc != cudaSuccess)
    return make_error(ErrorCode::cuda,
                      fmt::format("cudaEventSynchronize: {}", cudaGetErrorString(rc)));
  return {};
}

Result<void> Config::validate() const {
  if (num_sms < 1 || num_sms > 1024)
    return make_error(ErrorCode::invalid,
                      fmt::format("Config.num_sms = {}: must be 1..1024", num_sms));
  if (num_warps < 1 || num_warps > 32)
    return make_error(ErrorCode::invalid,
                      fmt::format("Config.num_warps = {}: must be 1..32", num_warps));
  if (nvl_chunk != 1 && nvl_chunk != 2 && nvl_chunk != 4 && nvl_chunk != 8)
    return make_error(ErrorCode::invalid,
                      fmt::format("Config.nvl_chunk = {}: must be 1, 2, 4 or 8", nvl_chunk));
  return {};
}

}  // namespace epkit::ep
