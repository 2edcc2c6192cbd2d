// The reference dispatch and combine (reference.h): the routing and every
// metadata row made on the host, the token rows packed by a small gather
// kernel, all moved by NCCL grouped send/recv. Slow and plain on purpose: it
// is what the engine is checked against.
#include "ep_harness/reference.h"

#include <fmt/format.h>

#include <cstring>
#include <thread>

#include "ep_harness/reference_kernels.h"
#include "ep_harness/reference_plan.h"
#include "runtime/deadline.h"

namespace epkit::harness {
namespace {

// Every wait on the stream or the communicator is bounded: a peer that never
// calls in becomes a timeout error, not a hang.
constexpr double k_timeout_s = 120.0;

Error nccl_failed(const NcclContext& c, ncclResult_t rc, const std::string& what) {
  const char* last = c.api->get_last_error != nullptr ? c.api->get_last_error(c.comm) : nullptr;
  return make_error(
      ErrorCode::nccl,
      fmt::format("reference path: {} on rank {} failed: {}{}", what, c.rank, c.api->describe(rc),
                  last != nullptr && *last != 0 ? fmt::format(": {}", last) : ""));
}

Error timed_out(const NcclContext& c, const std::string& what) {
  return make_error(ErrorCode::timeout,
                    fmt::format("reference path: {} on rank {} did not complete in {} s (a rank "
                                "that never called in?)",
                                what, c.rank, k_timeout_s));
}

// A non-blocking communicator answers ncclInProgress until it has taken the
// call and refuses the next one meanwhile: wait for it to settle.
Result<void> settle(const NcclContext& c, ncclResult_t rc, const std::string& what) {
  if (rc == ncclSuccess) return {};
  if (rc != ncclInProgress) return nccl_failed(c, rc, what);
  auto deadline = runtime::Deadline::after_seconds(k_timeout_s);
  for (;;) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t q = c.api->comm_get_async_error(c.comm, &state);
    if (q != ncclSuccess) return nccl_failed(c, q, what + " (ncclCommGetAsyncError)");
    if (state == ncclSuccess) return {};
    if (state != ncclInProgress) return nccl_failed(c, state, what);
    if (deadline.expired()) return timed_out(c, what);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Waits until the stream is idle, watching for asynchronous NCCL errors.
Result<void> wait_stream(const NcclContext& c, const std::string& what) {
  auto deadline = runtime::Deadline::after_seconds(k_timeout_s);
  for (;;) {
    cudaError_t rc = cudaStreamQuery(c.stream);
    if (rc == cudaSuccess) return {};
    if (rc != cudaErrorNotReady) return cuda_error(rc, "reference path: " + what);
    ncclResult_t state = ncclSuccess;
    if (c.api->comm_get_async_error(c.comm, &state) == ncclSuccess && state != ncclSuccess &&
        state != ncclInProgress)
      return nccl_failed(c, state, what);
    if (deadline.expired()) return timed_out(c, what);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

Result<void> check_context(const NcclContext& c) {
  if (c.api == nullptr || c.comm == nullptr)
    return make_error(ErrorCode::invalid, "reference path: no NCCL API or communicator");
  if (c.num_ranks < 1 || c.rank < 0 || c.rank >= c.num_ranks)
    return make_error(ErrorCode::invalid,
                      fmt::format("reference path: rank {} of {}", c.rank, c.num_ranks));
  return {};
}

// A 2-D input the caller passed. A tensor of zero rows has no memory (data is
// null) but keeps its column count, so that counts as given too: a rank with
// no tokens must make the same calls as the others.
bool given(const ep::TensorView& v) {
  return v.data != nullptr || (v.ndim == 2 && v.shape[1] > 0);
}

Result<void> check_matrix(const ep::TensorView& v, const char* name, std::int64_t rows,
                          std::int64_t cols) {
  if (v.ndim != 2 || v.rows() != rows || (cols >= 0 && v.cols() != cols))
    return make_error(ErrorCode::invalid,
                      fmt::format("reference path: {} is {}, expected [{}, {}]", name, v.describe(),
                                  rows, cols >= 0 ? fmt::format("{}", cols) : "*"));
  if (v.data == nullptr && v.numel() > 0)
    return make_error(ErrorCode::invalid,
                      fmt::format("reference path: {} ({}) has no data", name, v.describe()));
  return {};
}

Result<ep::DeviceMemory> upload(const NcclContext& c, const void* host, std::size_t bytes,
                                const std::string& what) {
  auto mem = ep::DeviceMemory::allocate(bytes);
  if (!mem) return mem.error();
  if (bytes > 0)
    EPKIT_TRY(cuda_ok(cudaMemcpyAsync(mem->get(), host, bytes, cudaMemcpyHostToDevice, c.stream),
                      "reference path: uploading " + what));
  return mem;
}

std::vector<std::int64_t> as_int64(const std::vector<std::uint8_t>& bytes, ep::DType dtype) {
  std::vector<std::int64_t> out(bytes.size() / dtype_size(dtype));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (dtype == ep::DType::int64) {
      std::memcpy(&out[i], bytes.data() + i * 8, 8);
    } else {
      std::int32_t v = 0;
      std::memcpy(&v, bytes.data() + i * 4, 4);
      out[i] = v;
    }
  }
  return out;
}

// to_host for any view. A one-row view's row stride is never used, but
// to_host hands it to cudaMemcpy2D as the pitch (a column-major [1, n]
// view has pitch 1 element, below the row width, which CUDA refuses).
Result<std::vector<std::uint8_t>> copy_to_host(ep::TensorView v) {
  if (v.ndim == 2 && v.rows() <= 1 && v.strides[1] == 1) v.strides[0] = v.cols();
  return to_host(v);
}

// Int32 all-gather through NCCL: every rank's `mine` (same length), by rank.
Result<std::vector<int>> all_gather_ints(const NcclContext& c, const std::vector<int>& mine,
                                         const std::string& what) {
  const std::size_t count = mine.size();
  auto send = upload(c, mine.data(), count * sizeof(int), what);
  if (!send) return send.error();
  auto recv =
      ep::DeviceMemory::allocate(count * static_cast<std::size_t>(c.num_ranks) * sizeof(int));
  if (!recv) return recv.error();
  EPKIT_TRY(settle(c,
                   c.api->all_gather(send->get(), recv->get(), count, ncclInt32, c.comm, c.stream),
                   what + " (ncclAllGather)"));
  std::vector<int> out(count * static_cast<std::size_t>(c.num_ranks));
  EPKIT_TRY(cuda_ok(cudaMemcpyAsync(out.data(), recv->get(), out.size() * sizeof(int),
                                    cudaMemcpyDeviceToHost, c.stream),
                    "reference path: copying " + what + " to the host"));
  EPKIT_TRY(wait_stream(c, what));
  return out;
}

// Bytes to and from each peer, as offsets into one send and one receive
// buffer.
struct Transfer {
  std::vector<std::size_t> send_offset, send_bytes, recv_offset, recv_bytes;
};

// One grouped round of ncclSend/ncclRecv; zero-size pairs are skipped (both
// sides know the size, so both skip). Synchronous.
Result<void> exchange(const NcclContext& c, const void* send, void* recv, const Transfer& t,
                      const std::string& what) {
  EPKIT_TRY(settle(c, c.api->group_start(), what + " (ncclGroupStart)"));
  Result<void> first;
  for (int r = 0; r < c.num_ranks && first.ok(); ++r) {
    auto ri = static_cast<std::size_t>(r);
    ncclResult_t rc = ncclSuccess;
    if (t.send_bytes[ri] > 0) {
      rc = c.api->send(static_cast<const std::uint8_t*>(send) + t.send_offset[ri], t.send_bytes[ri],
                       ncclUint8, r, c.comm, c.stream);
      if (rc != ncclSuccess && rc != ncclInProgress)
        first = nccl_failed(c, rc, fmt::format("{} (ncclSend to rank {})", what, r));
    }
    if (first.ok() && t.recv_bytes[ri] > 0) {
      rc = c.api->recv(static_cast<std::uint8_t*>(recv) + t.recv_offset[ri], t.recv_bytes[ri],
                       ncclUint8, r, c.comm, c.stream);
      if (rc != ncclSuccess && rc != ncclInProgress)
        first = nccl_failed(c, rc, fmt::format("{} (ncclRecv from rank {})", what, r));
    }
  }
  // The group is closed even after a failed call, so the communicator stays
  // usable for the caller's error handling.
  auto ended = settle(c, c.api->group_end(), what + " (ncclGroupEnd)");
  if (!first) return first;
  if (!ended) return ended;
  return wait_stream(c, what);
}

// Dispatch direction: packed rows out, rows by source in.
Transfer dispatch_transfer(const DispatchPlan& p, std::size_t row_bytes) {
  Transfer t;
  for (int r = 0; r < p.num_ranks; ++r) {
    auto ri = static_cast<std::size_t>(r);
    t.send_offset.push_back(static_cast<std::size_t>(p.send_offset[ri]) * row_bytes);
    t.send_bytes.push_back(static_cast<std::size_t>(p.send_count[ri]) * row_bytes);
    t.recv_offset.push_back(static_cast<std::size_t>(p.recv_offset[ri]) * row_bytes);
    t.recv_bytes.push_back(static_cast<std::size_t>(p.recv_count[ri]) * row_bytes);
  }
  return t;
}

// Combine direction: the same rows going back.
Transfer combine_transfer(const DispatchPlan& p, std::size_t row_bytes) {
  Transfer d = dispatch_transfer(p, row_bytes);
  return Transfer{d.recv_offset, d.recv_bytes, d.send_offset, d.send_bytes};
}

// Sends packed rows (device memory, plan order) and returns the received
// rows as a [received, cols] tensor.
Result<ep::DeviceTensor> exchange_rows(const NcclContext& c, const DispatchPlan& p,
                                       const void* packed, ep::DType dtype, std::int64_t cols,
                                       const std::string& what) {
  auto out = ep::DeviceTensor::uninitialised(dtype, p.num_recv_tokens, cols);
  if (!out) return out;
  std::size_t row_bytes = static_cast<std::size_t>(cols) * dtype_size(dtype);
  EPKIT_TRY(exchange(c, packed, out->memory.get(), dispatch_transfer(p, row_bytes), what));
  return out;
}

// The same from packed rows on the host.
Result<ep::DeviceTensor> exchange_host_rows(const NcclContext& c, const DispatchPlan& p,
                                            const std::vector<std::uint8_t>& packed,
                                            ep::DType dtype, std::int64_t cols,
                                            const std::string& what) {
  auto dev = upload(c, packed.data(), packed.size(), what);
  if (!dev) return dev.error();
  return exchange_rows(c, p, dev->get(), dtype, cols, what);
}

// What every rank tells the others before any data moves: its counts, and
// enough about its inputs that a mismatch (one rank FP8, another BF16) is an
// error on every rank instead of a hang in mismatched send/recv.
enum Meta : int {
  m_ok,
  m_hidden,
  m_x_dtype,
  m_has_scales,
  m_has_topk,
  m_topk_dtype,
  m_topk_n,
  m_has_weights,
  m_has_expert_counts,
  m_num_experts,
  m_count,
};
constexpr const char* k_meta_names[m_count] = {"ok",
                                               "hidden",
                                               "x dtype",
                                               "x_scales given",
                                               "topk_idx given",
                                               "topk_idx dtype",
                                               "top-k",
                                               "topk_weights given",
                                               "num_tokens_per_expert given (no top-k)",
                                               "num_experts"};

// Everything a rank works out alone before the collective part.
struct LocalDispatch {
  HostLayout layout;
  std::vector<std::int64_t> topk;  // [tokens * topk_n], when given
  int topk_n = 0;
  std::vector<int> meta = std::vector<int>(m_count, 0);
};

Result<HostLayout> layout_from_rank_mask(const ep::TensorView& is_token_in_rank, int tokens,
                                         int num_experts, int num_ranks) {
  if (num_experts < 1 || num_experts % num_ranks != 0)
    return make_error(ErrorCode::invalid,
                      fmt::format("reference_dispatch: {} experts do not split evenly over {} "
                                  "ranks",
                                  num_experts, num_ranks));
  EPKIT_TRY(check_matrix(is_token_in_rank, "is_token_in_rank", tokens, num_ranks));
  if (is_token_in_rank.dtype != ep::DType::boolean)
    return make_error(ErrorCode::invalid, "reference_dispatch: is_token_in_rank is " +
                                              is_token_in_rank.describe() + ", expected bool");
  auto mask = copy_to_host(is_token_in_rank);
  if (!mask) return mask.error();
  HostLayout l;
  l.num_tokens = tokens;
  l.num_ranks = num_ranks;
  l.num_experts = num_experts;
  l.num_tokens_per_rank.assign(static_cast<std::size_t>(num_ranks), 0);
  l.num_tokens_per_expert.assign(static_cast<std::size_t>(num_experts), 0);
  l.is_token_in_rank.resize(mask->size());
  for (std::size_t i = 0; i < mask->size(); ++i) {
    l.is_token_in_rank[i] = (*mask)[i] != 0 ? 1 : 0;
    l.num_tokens_per_rank[i % static_cast<std::size_t>(num_ranks)] += l.is_token_in_rank[i];
  }
  return l;
}

Result<LocalDispatch> inspect(const ep::DispatchArgs& a, int num_experts, int num_ranks) {
  LocalDispatch out;
  const ep::TensorView& x = a.x;
  if (x.ndim != 2 || (x.dtype != ep::DType::bf16 && x.dtype != ep::DType::fp8_e4m3))
    return make_error(ErrorCode::invalid, "reference_dispatch: x is " + x.describe() +
                                              ", expected BF16 or FP8 E4M3 [tokens, hidden]");
  const std::int64_t tokens = x.rows();
  const std::int64_t hidden = x.cols();
  EPKIT_TRY(check_matrix(x, "x", tokens, hidden));
  if (!x.row_major())
    return make_error(ErrorCode::invalid, "reference_dispatch: x's rows are not contiguous");
  if (a.expert_alignment < 1)
    return make_error(
        ErrorCode::invalid,
        fmt::format("reference_dispatch: expert_alignment {} is below 1", a.expert_alignment));
  out.meta[m_hidden] = static_cast<int>(hidden);
  out.meta[m_x_dtype] = static_cast<int>(x.dtype);
  out.meta[m_num_experts] = num_experts;
  if (x.dtype == ep::DType::fp8_e4m3) {
    if (hidden % 128 != 0)
      return make_error(
          ErrorCode::invalid,
          fmt::format("reference_dispatch: FP8 hidden {} is not a multiple of 128", hidden));
    if (!given(a.x_scales))
      return make_error(ErrorCode::invalid, "reference_dispatch: FP8 x without x_scales");
    EPKIT_TRY(check_matrix(a.x_scales, "x_scales", tokens, hidden / 128));
    if (a.x_scales.dtype != ep::DType::fp32)
      return make_error(ErrorCode::invalid,
                        "reference_dispatch: x_scales is " + a.x_scales.describe() + ", not FP32");
    out.meta[m_has_scales] = 1;
  } else if (given(a.x_scales)) {
    return make_error(ErrorCode::invalid, "reference_dispatch: x_scales given for BF16 x");
  }
  if (given(a.topk_idx)) {
    const ep::TensorView& ti = a.topk_idx;
    if (ti.dtype != ep::DType::int64 && ti.dtype != ep::DType::int32)
      return make_error(ErrorCode::invalid,
                        "reference_dispatch: topk_idx is " + ti.describe() + ", not int64/int32");
    EPKIT_TRY(check_matrix(ti, "topk_idx", tokens, -1));
    out.topk_n = static_cast<int>(ti.cols());
    auto bytes = copy_to_host(ti);
    if (!bytes) return bytes.error();
    out.topk = as_int64(*bytes, ti.dtype);
    auto layout =
        host_layout(out.topk, static_cast<int>(tokens), out.topk_n, num_experts, num_ranks);
    if (!layout) return layout.error();
    out.layout = std::move(*layout);
    out.meta[m_has_topk] = 1;
    out.meta[m_topk_dtype] = static_cast<int>(ti.dtype);
    out.meta[m_topk_n] = out.topk_n;
  } else if (given(a.is_token_in_rank)) {
    // No top-k (DeepEP's with_topk=False): the routing comes from the
    // layout's mask, the per-expert counts from its num_tokens_per_expert.
    auto layout =
        layout_from_rank_mask(a.is_token_in_rank, static_cast<int>(tokens), num_experts, num_ranks);
    if (!layout) return layout.error();
    out.layout = std::move(*layout);
    if (given(a.num_tokens_per_expert)) {
      const ep::TensorView& ne = a.num_tokens_per_expert;
      if (ne.dtype != ep::DType::int32 || ne.numel() != num_experts || ne.data == nullptr)
        return make_error(ErrorCode::invalid, "reference_dispatch: num_tokens_per_expert is " +
                                                  ne.describe() +
                                                  fmt::format(", expected int32[{}]", num_experts));
      auto bytes = copy_to_host(ne);
      if (!bytes) return bytes.error();
      std::memcpy(out.layout.num_tokens_per_expert.data(), bytes->data(), bytes->size());
      out.meta[m_has_expert_counts] = 1;
    }
  } else {
    return make_error(ErrorCode::invalid,
                      "reference_dispatch: neither topk_idx nor is_token_in_rank given: no "
                      "routing");
  }
  if (given(a.topk_weights)) {
    if (out.meta[m_has_topk] == 0)
      return make_error(ErrorCode::invalid, "reference_dispatch: topk_weights without topk_idx");
    EPKIT_TRY(check_matrix(a.topk_weights, "topk_weights", tokens, out.topk_n));
    if (a.topk_weights.dtype != ep::DType::fp32)
      return make_error(ErrorCode::invalid, "reference_dispatch: topk_weights is " +
                                                a.topk_weights.describe() + ", not FP32");
    out.meta[m_has_weights] = 1;
  }
  out.meta[m_ok] = 1;
  return out;
}

// Checks every rank's meta (rows of `gathered`, `stride` ints each, meta
// first) agree with rank 0's; every rank reaches the same verdict.
Result<void> check_agreement(const std::vector<int>& gathered, std::size_t stride, int ranks,
                             int me, const char* op) {
  for (int r = 0; r < ranks; ++r) {
    const int* row = gathered.data() + static_cast<std::size_t>(r) * stride;
    if (row[m_ok] == 0)
      return make_error(ErrorCode::invalid,
                        fmt::format("{}: rank {} failed its own checks (its error says why); rank "
                                    "{} stops too",
                                    op, r, me));
  }
  for (int r = 1; r < ranks; ++r)
    for (int f = 0; f < m_count; ++f) {
      int theirs = gathered[static_cast<std::size_t>(r) * stride + static_cast<std::size_t>(f)];
      if (theirs != gathered[static_cast<std::size_t>(f)])
        return make_error(
            ErrorCode::invalid,
            fmt::format("{}: ranks disagree on {}: rank 0 has {}, rank {} has {}", op,
                        k_meta_names[f], gathered[static_cast<std::size_t>(f)], r, theirs));
    }
  return {};
}

}  // namespace

Result<ReferenceDispatch> reference_dispatch(const NcclContext& c, const ep::DispatchArgs& a,
                                             int num_experts) {
  EPKIT_TRY(check_context(c));
  const int me = c.rank;
  const int n = c.num_ranks;
  // The inputs may come from any stream (the engine's, the caller's); the
  // reference reads them on its own, so everything before must be done.
  EPKIT_TRY(cuda_ok(cudaDeviceSynchronize(), "reference_dispatch: cudaDeviceSynchronize"));

  // Local checks first, but every rank joins the all-gather either way, so a
  // rank that fails makes the others fail rather than hang.
  auto local = inspect(a, num_experts, n);
  std::vector<int> mine(m_count, 0);
  if (local) mine = local->meta;
  for (int r = 0; r < n; ++r)
    mine.push_back(local ? local->layout.num_tokens_per_rank[static_cast<std::size_t>(r)] : 0);
  auto gathered = all_gather_ints(c, mine, "reference_dispatch: exchanging counts");
  if (!gathered) return gathered.error();
  if (!local) return local.error();
  const std::size_t stride = mine.size();
  EPKIT_TRY(check_agreement(*gathered, stride, n, me, "reference_dispatch"));
  std::vector<int> counts;
  for (int s = 0; s < n; ++s) {
    auto row =
        gathered->begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(s) * stride);
    counts.insert(counts.end(), row + m_count, row + static_cast<std::ptrdiff_t>(stride));
  }
  auto plan_r = plan_dispatch(local->layout, counts, me);
  if (!plan_r) return plan_r.error();
  const DispatchPlan& p = *plan_r;
  const std::size_t packed_rows = p.packed_token.size();
  const int topk_n = local->topk_n;
  const int experts_per_rank = num_experts / n;

  ReferenceDispatch out;
  out.num_recv_tokens = p.num_recv_tokens;
  out.rank_prefix_matrix = p.rank_prefix_matrix;
  out.send_row = p.send_row;

  // Token rows: packed on the device, then exchanged.
  {
    const ep::TensorView& x = a.x;
    const std::size_t row_bytes = static_cast<std::size_t>(x.cols()) * dtype_size(x.dtype);
    auto rows = upload(c, p.packed_token.data(), packed_rows * sizeof(int),
                       "reference_dispatch: packed token list");
    if (!rows) return rows.error();
    auto packed = ep::DeviceMemory::allocate(packed_rows * row_bytes);
    if (!packed) return packed.error();
    const auto stride_bytes =
        static_cast<std::int64_t>(x.strides[0]) * static_cast<std::int64_t>(dtype_size(x.dtype));
    EPKIT_TRY(cuda_ok(kernels::reference_gather_rows(packed->get(), x.data, stride_bytes, row_bytes,
                                                     static_cast<const int*>(rows->get()),
                                                     static_cast<int>(packed_rows), c.stream),
                      "reference_dispatch: packing x"));
    auto recv = exchange_rows(c, p, packed->get(), x.dtype, x.cols(), "reference_dispatch: x");
    if (!recv) return recv.error();
    out.recv_x = std::move(*recv);
  }

  // Metadata rows: packed on the host.
  if (local->meta[m_has_scales] != 0) {
    auto scales = copy_to_host(a.x_scales);  // row-major, whatever the input's strides
    if (!scales) return scales.error();
    const std::size_t row_bytes = static_cast<std::size_t>(a.x_scales.cols()) * sizeof(float);
    std::vector<std::uint8_t> packed(packed_rows * row_bytes);
    for (std::size_t i = 0; i < packed_rows; ++i)
      std::memcpy(packed.data() + i * row_bytes,
                  scales->data() + static_cast<std::size_t>(p.packed_token[i]) * row_bytes,
                  row_bytes);
    auto recv = exchange_host_rows(c, p, packed, ep::DType::fp32, a.x_scales.cols(),
                                   "reference_dispatch: x_scales");
    if (!recv) return recv.error();
    out.recv_x_scales = std::move(*recv);
  }

  if (local->meta[m_has_topk] != 0) {
    // Each packed row's indices as its destination's local experts.
    const ep::DType idx_type = a.topk_idx.dtype;
    const std::size_t idx_size = dtype_size(idx_type);
    std::vector<std::uint8_t> idx(packed_rows * static_cast<std::size_t>(topk_n) * idx_size);
    // Weights go with their index: 0 where the destination sees -1.
    const bool has_weights = local->meta[m_has_weights] != 0;
    std::vector<float> weights;
    if (has_weights) {
      auto w = copy_to_host(a.topk_weights);
      if (!w) return w.error();
      weights.resize(w->size() / sizeof(float));
      if (!w->empty()) std::memcpy(weights.data(), w->data(), w->size());
    }
    std::vector<float> packed_weights(has_weights ? packed_rows * static_cast<std::size_t>(topk_n)
                                                  : 0);
    for (int r = 0; r < n; ++r) {
      auto ri = static_cast<std::size_t>(r);
      for (int i = p.send_offset[ri]; i < p.send_offset[ri] + p.send_count[ri]; ++i) {
        const auto t = static_cast<std::size_t>(p.packed_token[static_cast<std::size_t>(i)]);
        for (int k = 0; k < topk_n; ++k) {
          const std::size_t src =
              t * static_cast<std::size_t>(topk_n) + static_cast<std::size_t>(k);
          const std::size_t dst = static_cast<std::size_t>(i) * static_cast<std::size_t>(topk_n) +
                                  static_cast<std::size_t>(k);
          std::int64_t local_e = to_local_expert(local->topk[src], r, experts_per_rank);
          if (idx_type == ep::DType::int64) {
            std::memcpy(idx.data() + dst * 8, &local_e, 8);
          } else {
            auto v = static_cast<std::int32_t>(local_e);
            std::memcpy(idx.data() + dst * 4, &v, 4);
          }
          if (has_weights) packed_weights[dst] = local_e < 0 ? 0.0f : weights[src];
        }
      }
    }
    auto recv_idx = exchange_host_rows(c, p, idx, idx_type, topk_n, "reference_dispatch: topk_idx");
    if (!recv_idx) return recv_idx.error();
    out.recv_topk_idx = std::move(*recv_idx);
    if (has_weights) {
      std::vector<std::uint8_t> bytes(packed_weights.size() * sizeof(float));
      if (!bytes.empty()) std::memcpy(bytes.data(), packed_weights.data(), bytes.size());
      auto recv_w = exchange_host_rows(c, p, bytes, ep::DType::fp32, topk_n,
                                       "reference_dispatch: topk_weights");
      if (!recv_w) return recv_w.error();
      out.recv_topk_weights = std::move(*recv_w);
    }
  }

  {
    std::vector<std::uint8_t> src(packed_rows * sizeof(std::int32_t));
    if (!src.empty()) std::memcpy(src.data(), p.packed_token.data(), src.size());
    auto recv = exchange_host_rows(c, p, src, ep::DType::int32, 1, "reference_dispatch: src_idx");
    if (!recv) return recv.error();
    out.recv_src_idx = std::move(*recv);
    out.recv_src_idx.view =
        ep::TensorView::vector(out.recv_src_idx.memory.get(), ep::DType::int32, p.num_recv_tokens);
  }

  // Per local expert counts.
  if (local->meta[m_has_topk] != 0) {
    auto recv_idx = copy_to_host(out.recv_topk_idx.view);
    if (!recv_idx) return recv_idx.error();
    out.num_recv_tokens_per_expert =
        count_recv_per_expert(as_int64(*recv_idx, out.recv_topk_idx.view.dtype), p.num_recv_tokens,
                              topk_n, experts_per_rank, a.expert_alignment);
  } else {
    std::vector<int> per_expert(local->layout.num_tokens_per_expert.begin(),
                                local->layout.num_tokens_per_expert.end());
    std::vector<int> sums(static_cast<std::size_t>(experts_per_rank), 0);
    if (local->meta[m_has_expert_counts] != 0) {
      auto all = all_gather_ints(c, per_expert, "reference_dispatch: exchanging expert counts");
      if (!all) return all.error();
      for (int s = 0; s < n; ++s)
        for (int e = 0; e < experts_per_rank; ++e)
          sums[static_cast<std::size_t>(e)] +=
              (*all)[static_cast<std::size_t>(s) * static_cast<std::size_t>(num_experts) +
                     static_cast<std::size_t>(me * experts_per_rank + e)];
    }
    for (int& v : sums) v = (v + a.expert_alignment - 1) / a.expert_alignment * a.expert_alignment;
    out.num_recv_tokens_per_expert = std::move(sums);
  }
  out.layout = std::move(local->layout);
  return out;
}

Result<ReferenceCombine> reference_combine(const NcclContext& c, const ReferenceDispatch& d,
                                           const ep::TensorView& x,
                                           const ep::TensorView& topk_weights,
                                           const std::array<ep::TensorView, 2>& bias) {
  EPKIT_TRY(check_context(c));
  const int me = c.rank;
  const int n = c.num_ranks;
  EPKIT_TRY(cuda_ok(cudaDeviceSynchronize(), "reference_combine: cudaDeviceSynchronize"));

  // Local checks; as in dispatch, every rank joins the all-gather.
  auto check = [&]() -> Result<void> {
    if (x.ndim != 2 || x.dtype != ep::DType::bf16)
      return make_error(ErrorCode::invalid, "reference_combine: x is " + x.describe() +
                                                ", expected BF16 [received, hidden]");
    EPKIT_TRY(check_matrix(x, "x", d.num_recv_tokens, -1));
    if (!x.row_major())
      return make_error(ErrorCode::invalid, "reference_combine: x's rows are not contiguous");
    if (given(topk_weights)) {
      EPKIT_TRY(check_matrix(topk_weights, "topk_weights", d.num_recv_tokens, -1));
      if (topk_weights.dtype != ep::DType::fp32)
        return make_error(ErrorCode::invalid, "reference_combine: topk_weights is " +
                                                  topk_weights.describe() + ", not FP32");
    }
    if (d.layout.num_ranks != n)
      return make_error(ErrorCode::invalid,
                        fmt::format("reference_combine: the dispatch spans {} ranks, the "
                                    "communicator {}",
                                    d.layout.num_ranks, n));
    for (const ep::TensorView& b : bias)
      if (given(b) && (b.dtype != ep::DType::bf16 || b.ndim != 2 || b.cols() != x.cols() ||
                       !b.row_major() || (b.rows() > 1 && b.strides[0] != b.cols())))
        return make_error(ErrorCode::invalid, "reference_combine: bias " + b.describe() +
                                                  " must be a contiguous BF16 [tokens, hidden]");
    return {};
  }();
  std::vector<int> mine(m_count, 0);
  if (check) {
    mine[m_ok] = 1;
    mine[m_hidden] = static_cast<int>(x.cols());
    mine[m_has_weights] = given(topk_weights) ? 1 : 0;
    mine[m_topk_n] = given(topk_weights) ? static_cast<int>(topk_weights.cols()) : 0;
  }
  auto gathered = all_gather_ints(c, mine, "reference_combine: exchanging shapes");
  if (!gathered) return gathered.error();
  if (!check) return check.error();
  EPKIT_TRY(check_agreement(*gathered, mine.size(), n, me, "reference_combine"));
  auto plan_r = plan_from_prefix(d.layout, d.rank_prefix_matrix, me);
  if (!plan_r) return plan_r.error();
  const DispatchPlan& p = *plan_r;
  if (p.send_row != d.send_row || p.num_recv_tokens != d.num_recv_tokens)
    return make_error(ErrorCode::invalid,
                      "reference_combine: the dispatch's send_row does not follow from its "
                      "layout and prefix matrix");
  const int tokens = p.num_tokens;
  const std::size_t packed_rows = p.packed_token.size();
  auto rows = upload(c, p.packed_row.data(), p.packed_row.size() * sizeof(int),
                     "reference_combine: row map");
  if (!rows) return rows.error();
  const int* packed_row = static_cast<const int*>(rows->get());

  ReferenceCombine out;
  {
    const std::int64_t hidden = x.cols();
    const std::size_t row_bytes = static_cast<std::size_t>(hidden) * sizeof(std::uint16_t);
    // The rows go back contiguous; a strided x is packed first.
    ep::DeviceMemory dense;
    const void* send = x.data;
    if (x.rows() > 1 && x.strides[0] != hidden) {
      auto mem = ep::DeviceMemory::allocate(static_cast<std::size_t>(x.rows()) * row_bytes);
      if (!mem) return mem.error();
      dense = std::move(*mem);
      EPKIT_TRY(
          cuda_ok(cudaMemcpy2DAsync(dense.get(), row_bytes, x.data,
                                    static_cast<std::size_t>(x.strides[0]) * sizeof(std::uint16_t),
                                    row_bytes, static_cast<std::size_t>(x.rows()),
                                    cudaMemcpyDeviceToDevice, c.stream),
                  "reference_combine: packing x"));
      send = dense.get();
    }
    auto back = ep::DeviceMemory::allocate(packed_rows * row_bytes);
    if (!back) return back.error();
    EPKIT_TRY(
        exchange(c, send, back->get(), combine_transfer(p, row_bytes), "reference_combine: x"));
    auto combined = ep::DeviceTensor::uninitialised(ep::DType::bf16, tokens, hidden);
    if (!combined) return combined.error();
    EPKIT_TRY(cuda_ok(
        kernels::reference_combine_bf16(combined->memory.get(), back->get(), packed_row, tokens, n,
                                        c.ranks_per_node, static_cast<int>(hidden),
                                        given(bias[0]) ? bias[0].data : nullptr,
                                        given(bias[1]) ? bias[1].data : nullptr, c.stream),
        "reference_combine: summing x"));
    // `back` is freed at the end of this block: the sum must be done.
    EPKIT_TRY(wait_stream(c, "reference_combine: summing x"));
    out.combined_x = std::move(*combined);
  }
  if (given(topk_weights)) {
    const std::int64_t topk_n = topk_weights.cols();
    const std::size_t row_bytes = static_cast<std::size_t>(topk_n) * sizeof(float);
    auto w = copy_to_host(topk_weights);  // dense rows in receive order
    if (!w) return w.error();
    auto send = upload(c, w->data(), w->size(), "reference_combine: topk_weights");
    if (!send) return send.error();
    auto back = ep::DeviceMemory::allocate(packed_rows * row_bytes);
    if (!back) return back.error();
    EPKIT_TRY(exchange(c, send->get(), back->get(), combine_transfer(p, row_bytes),
                       "reference_combine: topk_weights"));
    auto combined = ep::DeviceTensor::uninitialised(ep::DType::fp32, tokens, topk_n);
    if (!combined) return combined.error();
    EPKIT_TRY(cuda_ok(
        kernels::reference_combine_fp32(static_cast<float*>(combined->memory.get()),
                                        static_cast<const float*>(back->get()), packed_row, tokens,
                                        n, c.ranks_per_node, static_cast<int>(topk_n), c.stream),
        "reference_combine: summing topk_weights"));
    EPKIT_TRY(wait_stream(c, "reference_combine: summing topk_weights"));
    out.combined_topk_weights = std::move(*combined);
  }
  return out;
}

}  // namespace epkit::harness
