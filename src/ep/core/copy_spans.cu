// copy_spans: several strided blocks of rows copied by one kernel launch.
// A binding hands a dispatch's outputs (received rows, scales, top-k,
// weights, source indices, the prefix matrix) to tensors the caller owns;
// one cudaMemcpy2DAsync each costs a launch's host time per output, which
// was most of a small call's cost in Python.
#include <epkit/ep.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "ep/core/buffer_parts.h"

namespace epkit::ep {
namespace kernels {
namespace {

constexpr int k_max_spans = 8;

struct CopySpansParams {
  CopySpan span[k_max_spans];
  int count = 0;
};

// blockIdx.y picks the span. 16-byte words where the span allows them,
// bytes otherwise (a bool [tokens, ranks] row is a few bytes).
__global__ void __launch_bounds__(512) copy_spans_kernel(CopySpansParams p) {
  const CopySpan& s = p.span[blockIdx.y];
  const auto* src = static_cast<const std::uint8_t*>(s.src);
  auto* dst = static_cast<std::uint8_t*>(s.dst);
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool vec = s.row_bytes % 16 == 0 && s.src_stride % 16 == 0 && s.dst_stride % 16 == 0 &&
                   reinterpret_cast<std::uintptr_t>(src) % 16 == 0 &&
                   reinterpret_cast<std::uintptr_t>(dst) % 16 == 0;
  if (vec) {
    const std::int64_t words = s.row_bytes / 16;
    const std::int64_t total = s.rows * words;
    for (std::int64_t i = first; i < total; i += step) {
      const std::int64_t r = i / words, w = i % words;
      reinterpret_cast<int4*>(dst + r * s.dst_stride)[w] =
          reinterpret_cast<const int4*>(src + r * s.src_stride)[w];
    }
  } else {
    const std::int64_t total = s.rows * s.row_bytes;
    for (std::int64_t i = first; i < total; i += step) {
      const std::int64_t r = i / s.row_bytes, b = i % s.row_bytes;
      dst[r * s.dst_stride + b] = src[r * s.src_stride + b];
    }
  }
}

}  // namespace
}  // namespace kernels

Result<void> copy_spans(const CopySpan* spans, int count, cudaStream_t stream) {
  if (count < 0 || (count > 0 && spans == nullptr))
    return invalid("copy_spans: a negative count, or no spans");
  for (int first = 0; first < count; first += kernels::k_max_spans) {
    kernels::CopySpansParams p;
    std::int64_t largest = 0;
    for (int i = first; i < std::min(count, first + kernels::k_max_spans); ++i) {
      const CopySpan& s = spans[i];
      if (s.rows < 0 || s.row_bytes < 0 || (s.rows > 0 && s.row_bytes > 0 &&
                                            (s.src == nullptr || s.dst == nullptr)))
        return invalid("copy_spans: span " + std::to_string(i) +
                       " has a negative size or a null pointer");
      if (s.rows == 0 || s.row_bytes == 0) continue;
      p.span[p.count++] = s;
      largest = std::max(largest, s.rows * s.row_bytes);
    }
    if (p.count == 0) continue;
    // Enough blocks to keep the copy bandwidth-bound, no more: the spans
    // are outputs of one operation, from a few KB to a few hundred MB.
    const std::int64_t blocks = std::clamp<std::int64_t>(largest / (512 * 16 * 4), 1, 132);
    dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.count));
    kernels::copy_spans_kernel<<<grid, 512, 0, stream>>>(p);
    if (cudaError_t rc = cudaGetLastError(); rc != cudaSuccess)
      return make_error(ErrorCode::cuda,
                        std::string("copy_spans: launch failed: ") + cudaGetErrorString(rc));
  }
  return {};
}

}  // namespace epkit::ep
