// The C ABI's conversions, error plumbing and stream helpers.
#include "ep_capi/ep_c_convert.h"

#include <fmt/format.h>

#include <utility>

namespace epkit::capi {

// Not in an anonymous namespace: epkit_ep_last_error below reads it.
thread_local std::string t_last_error;  // NOLINT

namespace {

bool valid_dtype(std::int32_t d) {
  return d >= EPKIT_EP_BF16 && d <= EPKIT_EP_BOOL;
}

epkit_ep_status cuda_fail(cudaError_t rc, const char* what) {
  return fail(EPKIT_EP_ERR_CUDA,
              fmt::format("{}: {} ({})", what, cudaGetErrorString(rc), cudaGetErrorName(rc)));
}

}  // namespace

epkit_ep_status fail(epkit_ep_status status, std::string message) {
  t_last_error = std::move(message);
  return status;
}

epkit_ep_status status_of(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid:
    case ErrorCode::not_found:
    case ErrorCode::permission:
      return EPKIT_EP_ERR_INVALID;
    case ErrorCode::unavailable:
      return EPKIT_EP_ERR_UNAVAILABLE;
    case ErrorCode::cuda:
      return EPKIT_EP_ERR_CUDA;
    case ErrorCode::timeout:
      return EPKIT_EP_ERR_TIMEOUT;
    case ErrorCode::nccl:
      return EPKIT_EP_ERR_BOOTSTRAP;
    case ErrorCode::internal:
      return EPKIT_EP_ERR_INTERNAL;
  }
  return EPKIT_EP_ERR_INTERNAL;
}

epkit_ep_status fail_with(const Error& error) {
  return fail(status_of(error.code), error.message);
}

ep::BufferOptions to_options(const epkit_ep_options& o) {
  ep::BufferOptions out;
  out.max_tokens = o.max_tokens;
  out.max_hidden = o.max_hidden;
  out.max_topk = o.max_topk;
  out.num_bytes = static_cast<std::size_t>(o.num_bytes);
  out.timeout_s = o.timeout_s;
  out.ranks_per_node = o.ranks_per_node;
  out.low_latency_bytes = static_cast<std::size_t>(o.low_latency_bytes);
  out.output_arena_bytes = static_cast<std::size_t>(o.output_arena_bytes);
  // Any value passes here: check_internode_options refuses one that names
  // no leg, by its number.
  out.network_leg = static_cast<ep::BufferOptions::NetworkLeg>(o.network_leg);
  out.emulated_nic_gbps = o.emulated_nic_gbps;
  out.emulated_nic_latency_us = o.emulated_nic_latency_us;
  out.internode_rings = o.internode_rings != 0;
  return out;
}

epkit_ep_status to_view(const epkit_ep_tensor& t, const char* name, ep::TensorView& out) {
  out = ep::TensorView{};
  if (t.ndim == 0 && t.data == nullptr) {
    out.shape = {0, 0, 0};  // not given
    return EPKIT_EP_OK;
  }
  if (t.ndim < 1 || t.ndim > 3)
    return fail(
        EPKIT_EP_ERR_INVALID,
        fmt::format("{}: ndim is {}; the engine takes tensors of rank 1 to 3", name, t.ndim));
  if (!valid_dtype(t.dtype))
    return fail(EPKIT_EP_ERR_INVALID, fmt::format("{}: unknown dtype code {}", name, t.dtype));
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[i] < 0 || t.strides[i] < 0)
      return fail(EPKIT_EP_ERR_INVALID,
                  fmt::format("{}: negative shape or stride in dimension {}", name, i));
  if (t.data == nullptr && t.shape[0] != 0)
    return fail(EPKIT_EP_ERR_INVALID,
                fmt::format("{}: {} rows but a null pointer", name, t.shape[0]));
  out.data = t.data;
  out.dtype = static_cast<ep::DType>(t.dtype);
  out.ndim = t.ndim;
  for (int i = 0; i < 3; ++i) {
    out.shape[static_cast<std::size_t>(i)] = i < t.ndim ? t.shape[i] : 0;
    out.strides[static_cast<std::size_t>(i)] = i < t.ndim ? t.strides[i] : 0;
  }
  return EPKIT_EP_OK;
}

epkit_ep_tensor from_view(const ep::TensorView& v) {
  epkit_ep_tensor t{};
  if (v.data == nullptr && v.numel() == 0 && !(v.ndim >= 2 && v.cols() > 0)) return t;
  t.data = v.data;
  t.dtype = static_cast<std::int32_t>(v.dtype);
  t.ndim = v.ndim;
  for (int i = 0; i < 3; ++i) {
    t.shape[i] = i < v.ndim ? v.shape[static_cast<std::size_t>(i)] : 0;
    t.strides[i] = i < v.ndim ? v.strides[static_cast<std::size_t>(i)] : 0;
  }
  return t;
}

epkit_ep_status copy_span(const epkit_ep_tensor& dst, const epkit_ep_tensor& src, int index,
                          ep::CopySpan& span) {
  ep::TensorView d;
  ep::TensorView s;
  std::string dn = fmt::format("copy destination {}", index);
  std::string sn = fmt::format("copy source {}", index);
  if (epkit_ep_status st = to_view(dst, dn.c_str(), d); st != EPKIT_EP_OK) return st;
  if (epkit_ep_status st = to_view(src, sn.c_str(), s); st != EPKIT_EP_OK) return st;
  if (d.dtype != s.dtype || d.ndim != s.ndim || d.shape != s.shape)
    return fail(EPKIT_EP_ERR_INVALID, fmt::format("copy {}: destination {} and source {} differ",
                                                  index, d.describe(), s.describe()));
  span = ep::CopySpan{};
  if (d.numel() == 0) return EPKIT_EP_OK;
  if (!d.row_major() || !s.row_major() || (d.ndim == 1 && (d.strides[0] != 1 || s.strides[0] != 1)))
    return fail(EPKIT_EP_ERR_INVALID,
                fmt::format("copy {}: rows must be contiguous (inner stride 1)", index));
  const auto es = static_cast<std::int64_t>(ep::dtype_size(d.dtype));
  span.src = s.data;
  span.dst = d.data;
  if (d.ndim == 3) {
    // Whole packed blocks only (what a low-latency output is).
    auto packed = [](const ep::TensorView& v) {
      return v.strides[2] == 1 && v.strides[1] == v.shape[2] &&
             v.strides[0] == v.shape[1] * v.shape[2];
    };
    if (!packed(d) || !packed(s))
      return fail(
          EPKIT_EP_ERR_INVALID,
          fmt::format("copy {}: rank-3 tensors are copied packed (row-major, no gaps)", index));
  }
  if (d.ndim == 2) {
    span.rows = d.rows();
    span.row_bytes = d.cols() * es;
    span.src_stride = s.strides[0] * es;
    span.dst_stride = d.strides[0] * es;
  } else {
    span.rows = 1;
    span.row_bytes = d.numel() * es;
  }
  return EPKIT_EP_OK;
}

epkit_ep_status record_on(cudaStream_t stream, void** event) {
  cudaEvent_t e = nullptr;
  cudaError_t rc = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (rc != cudaSuccess) return cuda_fail(rc, "cudaEventCreate");
  if ((rc = cudaEventRecord(e, stream)) != cudaSuccess) {
    cudaEventDestroy(e);
    return cuda_fail(rc, "cudaEventRecord");
  }
  *event = e;
  return EPKIT_EP_OK;
}

epkit_ep_status finish_on(cudaStream_t stream, const epkit_ep_order& order, void** event) {
  void* e = nullptr;
  if (epkit_ep_status s = record_on(stream, &e); s != EPKIT_EP_OK) return s;
  cudaError_t rc = cudaSuccess;
  if (order.async_finish == 0)
    rc = cudaStreamWaitEvent(static_cast<cudaStream_t>(order.stream), static_cast<cudaEvent_t>(e),
                             0);
  if (rc == cudaSuccess && order.want_event != 0 && event != nullptr) {
    *event = e;
    return EPKIT_EP_OK;
  }
  cudaEventDestroy(static_cast<cudaEvent_t>(e));
  return rc == cudaSuccess ? EPKIT_EP_OK : cuda_fail(rc, "cudaStreamWaitEvent");
}

}  // namespace epkit::capi

extern "C" {

const char* epkit_ep_last_error(void) {
  return epkit::capi::t_last_error.c_str();
}

const char* epkit_ep_status_name(int32_t status) {
  switch (status) {
    case EPKIT_EP_OK:
      return "ok";
    case EPKIT_EP_ERR_INVALID:
      return "invalid";
    case EPKIT_EP_ERR_UNAVAILABLE:
      return "unavailable";
    case EPKIT_EP_ERR_CUDA:
      return "cuda";
    case EPKIT_EP_ERR_TIMEOUT:
      return "timeout";
    case EPKIT_EP_ERR_BOOTSTRAP:
      return "bootstrap";
    case EPKIT_EP_ERR_INTERNAL:
      return "internal";
    default:
      return "unknown";
  }
}
}
