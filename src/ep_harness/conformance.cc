#include "ep_harness/conformance.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ep/testing.h"
#include "ep_harness/bounded_wait.h"
#include "ep_harness/conformance/case.h"
#include "ep_harness/conformance/low_latency_run.h"
#include "ep_harness/conformance_checks.h"
#include "ep_harness/conformance_gather.h"
#include "ep_harness/reference.h"
#include "ep_harness/store_bootstrap.h"

namespace epkit::harness {
namespace {

namespace cf = conformance;
using Bytes = std::vector<std::uint8_t>;

// DeepEP's combine tolerances (test_intranode.py).
constexpr double k_combine_limit = 5e-6;
constexpr double k_weights_limit = 1e-9;

// The caller's compute stream of the suite (the engine runs on its own).
class Stream {
 public:
  Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (m_stream != nullptr) cudaStreamDestroy(m_stream);
  }
  Result<void> create() {
    // A blocking stream: the legacy-stream copies of to_host() wait for it.
    return cuda_ok(cudaStreamCreate(&m_stream), "cudaStreamCreate");
  }
  cudaStream_t get() const { return m_stream; }

 private:
  cudaStream_t m_stream = nullptr;
};

struct Suite {
  Suite(runtime::GpuRank& g, const ConformanceOptions& o) : gpu(g), opts(o) {}
  runtime::GpuRank& gpu;
  const ConformanceOptions& opts;
  std::uint64_t seed = 0;
  int rank = 0;
  int ranks = 1;
  ep::Buffer* buffer = nullptr;
  bool internode = false;  // the Buffer spans several nodes
  NcclContext nccl;
  cudaStream_t stream = nullptr;
  // The last outputs of each kind, poisoned before the next call of that kind.
  std::vector<ep::TensorView> last_layout;
  std::vector<ep::TensorView> last_dispatch;
  /// The handle of the dispatch whose outputs last_dispatch names: an
  /// engine that allocates outputs per call frees them with it (ring mode),
  /// so it lives until they are poisoned.
  std::shared_ptr<const ep::DispatchHandle> last_dispatch_owner;
  std::vector<ep::TensorView> last_combine;
  // ConformanceOptions::flip_bit_rank is this rank, and no bit flipped yet.
  bool fault_pending = false;

  runtime::Deadline step() const { return runtime::Deadline::after_seconds(opts.timeout_s); }
};

using cf::Checks;

std::size_t row_bytes(const ep::TensorView& v) {
  return static_cast<std::size_t>(v.cols()) * dtype_size(v.dtype);
}

Result<Bytes> copy_out(const ep::TensorView& v) {
  if (v.data == nullptr || v.numel() == 0) return Bytes{};
  return to_host(v);
}

// Fills views with 0xFF bytes (NaN in BF16 and FP32, -1 in integers): a
// call that leaves an output unwritten cannot pass on stale data. The
// barrier keeps a fast rank from writing into a peer's buffer before that
// peer's memset is done.
Result<void> poison(Suite& s, std::vector<ep::TensorView>& views) {
  for (const auto& v : views) {
    if (v.data == nullptr || v.numel() == 0) continue;
    const std::size_t elem = dtype_size(v.dtype);
    cudaError_t rc;
    if (v.ndim == 1) {
      rc = cudaMemset(v.data, 0xff, static_cast<std::size_t>(v.rows()) * elem);
    } else if (v.strides[1] == 1) {
      rc = cudaMemset2D(v.data, static_cast<std::size_t>(v.strides[0]) * elem, 0xff, row_bytes(v),
                        static_cast<std::size_t>(v.rows()));
    } else {
      std::int64_t last = (v.rows() - 1) * v.strides[0] + (v.cols() - 1) * v.strides[1];
      rc = cudaMemset(v.data, 0xff, static_cast<std::size_t>(last + 1) * elem);
    }
    EPKIT_TRY(cuda_ok(rc, "poisoning " + v.describe()));
  }
  views.clear();
  EPKIT_TRY(cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize after poisoning"));
  if (&views == &s.last_dispatch) s.last_dispatch_owner.reset();
  return s.buffer->barrier();
}

// Fault injection (ConformanceOptions::flip_bit_rank): the lowest bit of the
// first byte of `v` flipped in device memory.
Result<void> flip_one_bit(const ep::TensorView& v) {
  std::uint8_t byte = 0;
  EPKIT_TRY(cuda_ok(cudaMemcpy(&byte, v.data, 1, cudaMemcpyDeviceToHost), "fault injection"));
  byte ^= 0x01;
  EPKIT_TRY(cuda_ok(cudaMemcpy(v.data, &byte, 1, cudaMemcpyHostToDevice), "fault injection"));
  // A pageable copy may return before it lands; the checks read it next.
  return cuda_ok(cudaStreamSynchronize(cudaStreamLegacy), "fault injection");
}

struct Order {
  ep::StreamOrder order;
  ep::Event previous;
};

// previous=T: an event recorded on the caller stream stands for it.
Result<Order> make_order(Suite& s, const CaseSpec& c) {
  Order o;
  o.order.stream = s.stream;
  o.order.async = c.async;
  if (c.previous) {
    cudaEvent_t e = nullptr;
    EPKIT_TRY(cuda_ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
    o.previous = ep::Event(e);
    EPKIT_TRY(cuda_ok(cudaEventRecord(e, s.stream), "cudaEventRecord"));
    o.order.previous = e;
  }
  return Result<Order>(std::move(o));
}

// async=T: the caller waits on the returned event itself.
Result<void> finish(Suite& s, const ep::Event& event, bool async) {
  if (async) {
    if (event.get() == nullptr) {
      return make_error(ErrorCode::internal, "an async operation returned no event to wait on");
    }
    EPKIT_TRY(wait_event(event.get(), s.opts.timeout_s, "waiting for the operation's event"));
  }
  return wait_stream(s.stream, s.opts.timeout_s, "waiting for the operation's stream");
}

template <typename T>
Result<std::vector<T>> all_gather(Suite& s, const std::vector<T>& mine, ncclDataType_t type,
                                  const std::string& milestone) {
  return gather_all(*s.gpu.session, s.nccl, mine, type, milestone, s.step());
}

// Every rank's top-k indices and weights, padded to the shape's tokens.
Result<cf::GatheredRouting> gather_routing(Suite& s, const std::vector<std::int64_t>& idx,
                                           const std::vector<float>& weights, int tokens,
                                           int case_no) {
  const auto& shape = s.opts.shape;
  const auto per_rank = static_cast<std::size_t>(shape.num_tokens * shape.num_topk);
  std::vector<std::int64_t> my_idx(per_rank, -1);
  std::vector<float> my_w(per_rank, 0.0f);
  std::copy(idx.begin(), idx.end(), my_idx.begin());
  std::copy(weights.begin(), weights.end(), my_w.begin());
  const std::string tag = fmt::format("ep/conf/{}/gather", case_no);
  auto counts = all_gather(s, std::vector<std::int64_t>{tokens}, ncclInt64, tag + "/tokens");
  if (!counts) return counts.error();
  auto all_idx = all_gather(s, my_idx, ncclInt64, tag + "/topk_idx");
  if (!all_idx) return all_idx.error();
  auto all_w = all_gather(s, my_w, ncclFloat32, tag + "/topk_weights");
  if (!all_w) return all_w.error();
  cf::GatheredRouting g;
  g.num_ranks = s.ranks;
  g.num_experts = shape.num_experts;
  g.num_topk = shape.num_topk;
  for (int r = 0; r < s.ranks; ++r) {
    auto at = static_cast<std::size_t>(r) * per_rank;
    auto n = static_cast<std::size_t>((*counts)[static_cast<std::size_t>(r)]) *
             static_cast<std::size_t>(shape.num_topk);
    g.num_tokens.push_back(static_cast<int>((*counts)[static_cast<std::size_t>(r)]));
    g.topk_idx.emplace_back(all_idx->begin() + static_cast<std::ptrdiff_t>(at),
                            all_idx->begin() + static_cast<std::ptrdiff_t>(at + n));
    g.topk_weights.emplace_back(all_w->begin() + static_cast<std::ptrdiff_t>(at),
                                all_w->begin() + static_cast<std::ptrdiff_t>(at + n));
  }
  return g;
}

// Host copies of a dispatch's outputs.
struct HostDispatch {
  std::int64_t rows = 0;
  Bytes x, scales, topk_idx, weights, src_idx, tokens_per_expert;
  std::size_t x_row = 0, scales_row = 0, idx_row = 0, weights_row = 0;
  ep::DType x_type = ep::DType::bf16;
  ep::DType idx_type = ep::DType::int64;
  std::vector<int> list;
  std::vector<int> rank_prefix;
  int handle_recv = -1;
};

std::vector<ep::TensorView> views_of(const ep::DispatchResult& d) {
  return {d.recv_x,       d.recv_x_scales,         d.recv_topk_idx, d.recv_topk_weights,
          d.recv_src_idx, d.recv_tokens_per_expert};
}

Result<HostDispatch> snapshot(const ep::DispatchResult& d, int rank) {
  HostDispatch h;
  h.rows = d.recv_x.rows();
  h.x_type = d.recv_x.dtype;
  h.idx_type = d.recv_topk_idx.dtype;
  h.x_row = row_bytes(d.recv_x);
  h.scales_row = row_bytes(d.recv_x_scales);
  h.idx_row = row_bytes(d.recv_topk_idx);
  h.weights_row = row_bytes(d.recv_topk_weights);
  auto take = [](const ep::TensorView& v, Bytes& out) -> Result<void> {
    auto b = copy_out(v);
    if (!b) return b.error();
    out = std::move(*b);
    return {};
  };
  EPKIT_TRY(take(d.recv_x, h.x));
  EPKIT_TRY(take(d.recv_x_scales, h.scales));
  EPKIT_TRY(take(d.recv_topk_idx, h.topk_idx));
  EPKIT_TRY(take(d.recv_topk_weights, h.weights));
  EPKIT_TRY(take(d.recv_src_idx, h.src_idx));
  EPKIT_TRY(take(d.recv_tokens_per_expert, h.tokens_per_expert));
  h.list = d.num_recv_tokens_per_expert;
  if (d.handle && d.handle->num_nodes > 1) {
    // Internode: the handle says where each source rank's rows start in
    // this rank's receive buffer (recv_gbl_rank_prefix_sum), which is this
    // rank's column of the all-rank prefix matrix the checks compare.
    h.handle_recv = d.handle->num_recv_tokens;
    Bytes m;
    EPKIT_TRY(take(d.handle->recv_gbl_rank_prefix_sum, m));
    auto v = cf::as_vector<std::int32_t>(m);
    const int n = d.handle->num_ranks;
    h.rank_prefix.assign(static_cast<std::size_t>(n * n), 0);
    for (int src = 0; src < n && static_cast<std::size_t>(src) < v.size(); ++src)
      h.rank_prefix[static_cast<std::size_t>(src * n + rank)] = v[static_cast<std::size_t>(src)];
  } else if (d.handle) {
    h.handle_recv = d.handle->num_recv_tokens;
    Bytes m;
    EPKIT_TRY(take(d.handle->rank_prefix_matrix, m));
    auto v = cf::as_vector<std::int32_t>(m);
    h.rank_prefix.assign(v.begin(), v.end());
  }
  return h;
}

Bytes float_bytes(const std::vector<float>& v) {
  Bytes out(v.size() * sizeof(float));
  std::copy_n(reinterpret_cast<const std::uint8_t*>(v.data()), out.size(), out.begin());
  return out;
}

std::vector<int> ints_of(const Bytes& b) {
  auto v = cf::as_vector<std::int32_t>(b);
  return {v.begin(), v.end()};
}

std::vector<float> values_of(const Bytes& x, ep::DType type, const Bytes& scales, std::int64_t rows,
                             std::int64_t hidden) {
  if (type == ep::DType::fp8_e4m3) {
    return cf::dequantize_fp8(x, cf::as_vector<float>(scales), rows, hidden);
  }
  return cf::decode_bf16(x);
}

// Both runs of a dispatch, bitwise.
void compare_runs(Checks& ck, const HostDispatch& a, const HostDispatch& b) {
  ck("run-to-run recv_x", cf::compare_bytes(a.x, b.x, a.x_row));
  ck("run-to-run recv_x_scales", cf::compare_bytes(a.scales, b.scales, a.scales_row));
  ck("run-to-run recv_topk_idx", cf::compare_bytes(a.topk_idx, b.topk_idx, a.idx_row));
  ck("run-to-run recv_topk_weights", cf::compare_bytes(a.weights, b.weights, a.weights_row));
  ck("run-to-run recv_src_idx", cf::compare_bytes(a.src_idx, b.src_idx, 4));
  ck("run-to-run per-expert list", cf::compare_ints(a.list, b.list));
  ck("run-to-run rank_prefix_matrix", cf::compare_ints(a.rank_prefix, b.rank_prefix));
}

// One case's state, handed from step to step of run_case: its inputs, the
// routing all ranks gathered, the layout, the dispatch arguments, the
// reference's results and the engine's kept dispatch.
struct CaseRun {
  CaseRun(Suite& suite, const CaseSpec& spec, int number)
      : s(suite), c(spec), shape(suite.opts.shape), case_no(number) {}
  Suite& s;
  const CaseSpec& c;
  const TestShape& shape;
  int case_no = 0;
  Checks ck;
  std::optional<TestInputs> inputs;
  int tokens = 0;
  int topk = 0;
  int experts = 0;
  int local = 0;
  std::int64_t hidden = 0;
  ep::TensorView idx_view;
  std::vector<std::int64_t> host_idx;
  std::vector<float> host_w;
  cf::ExpectedRecv want;
  HostLayout hl;
  std::optional<ep::Layout> layout;
  ep::DispatchArgs args;
  std::optional<ReferenceDispatch> ref;
  HostDispatch h;  // the second of the two dispatches, on the host
  std::int64_t rows = 0;
  std::optional<ep::DispatchResult> kept;  // and on the device

  // The steps, in order.
  Result<void> make_case_inputs();
  Result<void> check_layout();
  Result<void> dispatch_twice();
  Result<void> check_counts();
  Result<void> check_rows();
  Result<void> check_combine();
  Result<void> check_cached_dispatch();
  Result<void> check_worst_tokens();
};

// The case's inputs on this rank, the routing every rank gathered, the
// host's layout of it.
Result<void> CaseRun::make_case_inputs() {
  TestInputOptions in;
  in.shape = shape;
  in.shape.hidden = c.hidden;
  if (c.zero_tokens_rank == s.rank) in.shape.num_tokens = 0;
  in.kind = c.kind;
  in.seed = s.seed + static_cast<std::uint64_t>(case_no);
  in.rank = s.rank;
  in.num_ranks = s.ranks;
  if (c.masked_rank >= 0) in.masked_fraction = c.masked_rank == s.rank ? 1.0 : 0.3;
  in.only_rank = c.only_rank;
  auto made = make_test_inputs(in, s.stream);
  if (!made) return made.error();
  inputs.emplace(std::move(*made));
  EPKIT_TRY(cuda_ok(cudaStreamSynchronize(s.stream), "making the test inputs"));

  tokens = in.shape.num_tokens;
  idx_view = c.topk32 ? inputs->topk_idx32.view : inputs->topk_idx.view;
  auto idx_bytes = copy_out(inputs->topk_idx.view);
  if (!idx_bytes) return idx_bytes.error();
  auto w_bytes = copy_out(inputs->topk_weights.view);
  if (!w_bytes) return w_bytes.error();
  host_idx = cf::as_vector<std::int64_t>(*idx_bytes);
  host_w = cf::as_vector<float>(*w_bytes);

  auto routing = gather_routing(s, host_idx, host_w, tokens, case_no);
  if (!routing) return routing.error();
  want = cf::expected_recv(*routing, s.rank);
  auto made_hl = host_layout(host_idx, tokens, topk, experts, s.ranks);
  if (!made_hl) return made_hl.error();
  hl = std::move(*made_hl);
  return {};
}

// Layout, against the host's.
Result<void> CaseRun::check_layout() {
  EPKIT_TRY(poison(s, s.last_layout));
  auto lo = make_order(s, c);
  if (!lo) return lo.error();
  auto made = s.buffer->layout(idx_view, experts, lo->order);
  if (!made) return made.error();
  layout.emplace(std::move(*made));
  EPKIT_TRY(finish(s, layout->event, c.async));
  s.last_layout = {layout->num_tokens_per_rank, layout->num_tokens_per_expert,
                   layout->is_token_in_rank};
  {
    auto per_rank = copy_out(layout->num_tokens_per_rank);
    if (!per_rank) return per_rank.error();
    auto per_expert = copy_out(layout->num_tokens_per_expert);
    if (!per_expert) return per_expert.error();
    auto in_rank = copy_out(layout->is_token_in_rank);
    if (!in_rank) return in_rank.error();
    ck("layout num_tokens_per_rank", cf::compare_ints(hl.num_tokens_per_rank, ints_of(*per_rank)));
    ck("layout num_tokens_per_expert",
       cf::compare_ints(hl.num_tokens_per_expert, ints_of(*per_expert)));
    ck("layout is_token_in_rank",
       cf::compare_bytes(hl.is_token_in_rank, *in_rank, static_cast<std::size_t>(s.ranks)));
  }
  return {};
}

// The dispatch's arguments, the reference's dispatch, and the engine's
// dispatch run twice.
Result<void> CaseRun::dispatch_twice() {
  args.x = c.fp8 ? inputs->x_fp8.view : inputs->x.view;
  if (c.fp8) args.x_scales = inputs->x_scales_view;
  if (c.with_topk) {
    args.topk_idx = idx_view;
    args.topk_weights = inputs->topk_weights.view;
  }
  args.num_tokens_per_rank = layout->num_tokens_per_rank;
  args.is_token_in_rank = layout->is_token_in_rank;
  args.num_tokens_per_expert = layout->num_tokens_per_expert;
  args.expert_alignment = c.alignment;
  args.config.num_sms = s.opts.num_sms;

  // The reference always routes by topk_idx; weights only when the engine
  // gets them.
  ep::DispatchArgs ref_args = args;
  ref_args.topk_idx = idx_view;
  auto made_ref = reference_dispatch(s.nccl, ref_args, experts);
  if (!made_ref) return made_ref.error();
  ref.emplace(std::move(*made_ref));

  // Dispatch twice: both runs must agree bitwise.
  HostDispatch runs[2];
  for (int run = 0; run < 2; ++run) {
    EPKIT_TRY(poison(s, s.last_dispatch));
    auto order = make_order(s, c);
    if (!order) return order.error();
    args.order = order->order;
    auto d = s.buffer->dispatch(args);
    if (!d) return d.error();
    EPKIT_TRY(finish(s, d->event, c.async));
    s.last_dispatch = views_of(*d);
    s.last_dispatch_owner = d->handle;
    if (run == 1 && s.fault_pending && d->recv_x.data != nullptr && d->recv_x.rows() > 0) {
      EPKIT_TRY(flip_one_bit(d->recv_x));
      s.fault_pending = false;
    }
    auto snap = snapshot(*d, s.rank);
    if (!snap) return snap.error();
    runs[run] = std::move(*snap);
    if (run == 1) kept.emplace(std::move(*d));
  }
  compare_runs(ck, runs[0], runs[1]);
  h = std::move(runs[1]);
  rows = h.rows;
  return {};
}

// Shapes and counts against the gathered routing and the reference.
Result<void> CaseRun::check_counts() {
  ck.require("received rows", rows == want.num_recv,
             fmt::format("{} rows, the all-gathered routing sends {}", rows, want.num_recv));
  ck.require("handle num_recv_tokens", h.handle_recv == rows,
             fmt::format("{}, recv_x has {} rows", h.handle_recv, rows));
  ck.require("recv_x dtype", h.x_type == args.x.dtype,
             fmt::format("{}, the input is {}", to_string(h.x_type), to_string(args.x.dtype)));
  if (s.internode) {
    // Only this rank's column is known to an internode rank (see snapshot).
    std::vector<int> column(want.rank_prefix_matrix.size(), 0);
    for (int src = 0; src < s.ranks; ++src) {
      const auto at = static_cast<std::size_t>(src * s.ranks + s.rank);
      column[at] = want.rank_prefix_matrix[at];
    }
    ck("recv_gbl_rank_prefix_sum", cf::compare_ints(column, h.rank_prefix));
  } else {
    ck("rank_prefix_matrix", cf::compare_ints(want.rank_prefix_matrix, h.rank_prefix));
    ck("rank_prefix_matrix vs reference", cf::compare_ints(ref->rank_prefix_matrix, h.rank_prefix));
  }
  ck("per-expert list", cf::check_expert_list(h.list, want.tokens_per_expert, c.alignment));
  ck("recv_tokens_per_expert (device) vs list",
     cf::compare_ints(h.list, ints_of(h.tokens_per_expert)));
  if (c.with_topk) {
    ck("per-expert list vs reference", cf::compare_ints(ref->num_recv_tokens_per_expert, h.list));
  }

  return {};
}

// The received rows, indices and weights.
Result<void> CaseRun::check_rows() {
  if (c.kind == XKind::rank_constant && rows == want.num_recv) {
    ck("rank-constant recv_x",
       cf::check_rank_constant_rows(values_of(h.x, h.x_type, h.scales, rows, hidden), rows, hidden,
                                    h.rank_prefix, s.ranks, s.rank));
  }
  auto ref_x = copy_out(ref->recv_x.view);
  if (!ref_x) return ref_x.error();
  ck("recv_x vs reference", cf::compare_bytes(*ref_x, h.x, h.x_row));
  if (c.fp8) {
    auto ref_s = copy_out(ref->recv_x_scales.view);
    if (!ref_s) return ref_s.error();
    ck("recv_x_scales vs reference", cf::compare_bytes(*ref_s, h.scales, h.scales_row));
  }
  if (!s.internode) {  // an internode dispatch has no recv_src_idx (as DeepEP's)
    ck("recv_src_idx", cf::compare_ints(want.src_idx, ints_of(h.src_idx)));
    auto ref_src = copy_out(ref->recv_src_idx.view);
    if (!ref_src) return ref_src.error();
    ck("recv_src_idx vs reference", cf::compare_bytes(*ref_src, h.src_idx, 4));
  }

  if (c.with_topk) {
    ck.require(
        "recv_topk_idx dtype", h.idx_type == idx_view.dtype,
        fmt::format("{}, the input is {}", to_string(h.idx_type), to_string(idx_view.dtype)));
    const auto idx = cf::decode_index(h.topk_idx, static_cast<int>(dtype_size(h.idx_type)));
    ck("recv_topk_idx range and counts",
       cf::check_recv_topk_idx(idx, topk, local, want.tokens_per_expert));
    ck("recv_topk_idx", cf::compare_ints(want.topk_idx, idx));
    auto ref_idx = copy_out(ref->recv_topk_idx.view);
    if (!ref_idx) return ref_idx.error();
    ck("recv_topk_idx vs reference", cf::compare_bytes(*ref_idx, h.topk_idx, h.idx_row));
    const auto weights = cf::as_vector<float>(h.weights);
    if (c.kind == XKind::rank_constant) {
      ck("rank-constant recv_topk_weights",
         cf::check_rank_constant_weights(weights, idx, topk, h.rank_prefix, s.ranks, s.rank));
    }
    ck("recv_topk_weights vs source weights",
       cf::compare_bytes(float_bytes(want.topk_weights), h.weights, h.weights_row));
    auto ref_w = copy_out(ref->recv_topk_weights.view);
    if (!ref_w) return ref_w.error();
    ck("recv_topk_weights vs reference", cf::compare_bytes(*ref_w, h.weights, h.weights_row));
  }

  return {};
}

// Combine the received rows back and compare with the reference.
Result<void> CaseRun::check_combine() {
  // Combine the received rows back (BF16 inputs: DeepEP combines BF16 only).
  if (!c.fp8) {
    EPKIT_TRY(poison(s, s.last_combine));
    auto order = make_order(s, c);
    if (!order) return order.error();
    ep::CombineArgs ca;
    ca.x = kept->recv_x;
    if (c.with_topk) ca.topk_weights = kept->recv_topk_weights;
    // The other two inputs are copies of the same rows: the result must not change.
    ep::DeviceTensor outside_x, outside_w;
    if (c.combine_from != CaseSpec::CombineFrom::recv_x) {
      const std::int64_t in_rows = kept->recv_x.rows();
      if (c.combine_from == CaseSpec::CombineFrom::outside) {
        auto ox = ep::DeviceTensor::zeros(ep::DType::bf16, in_rows, hidden);
        if (!ox) return ox.error();
        outside_x = std::move(*ox);
        ca.x = outside_x.view;
        if (c.with_topk) {
          auto ow = ep::DeviceTensor::zeros(ep::DType::fp32, in_rows, topk);
          if (!ow) return ow.error();
          outside_w = std::move(*ow);
          ca.topk_weights = outside_w.view;
        }
      } else {
        auto ix = s.buffer->combine_input(in_rows, hidden);
        if (!ix) return ix.error();
        ca.x = *ix;
        if (c.with_topk) {
          auto iw = s.buffer->combine_weights_input(in_rows, topk);
          if (!iw) return iw.error();
          ca.topk_weights = *iw;
        }
      }
      auto copy_rows = [&](const ep::TensorView& to, const ep::TensorView& from) {
        std::size_t bytes = static_cast<std::size_t>(from.numel()) * dtype_size(from.dtype);
        return cuda_ok(cudaMemcpy(to.data, from.data, bytes, cudaMemcpyDeviceToDevice),
                       "copying the combine input");
      };
      if (in_rows > 0) {
        EPKIT_TRY(copy_rows(ca.x, kept->recv_x));
        if (c.with_topk) EPKIT_TRY(copy_rows(ca.topk_weights, kept->recv_topk_weights));
      }
    }
    // Biases: exact BF16 values from the token and column, different per rank.
    const std::int64_t my_tokens = inputs->x.view.rows();
    std::array<ep::DeviceTensor, 2> biases;
    for (int b = 0; b < c.biases; ++b) {
      std::vector<std::uint16_t> host(static_cast<std::size_t>(my_tokens * hidden));
      for (std::int64_t t = 0; t < my_tokens; ++t)
        for (std::int64_t j = 0; j < hidden; ++j) {
          const float v =
              static_cast<float>((t * 7 + j * 3 + s.rank * 5 + b * 11) % 17 - 8) * 0.375f;
          std::uint32_t bits;
          std::memcpy(&bits, &v, sizeof bits);
          host[static_cast<std::size_t>(t * hidden + j)] = static_cast<std::uint16_t>(bits >> 16);
        }
      auto bt = ep::DeviceTensor::from_host(ep::DType::bf16, my_tokens, hidden, host.data());
      if (!bt) return bt.error();
      biases[static_cast<std::size_t>(b)] = std::move(*bt);
      ca.bias[static_cast<std::size_t>(b)] = biases[static_cast<std::size_t>(b)].view;
    }
    ep::DeviceTensor caller_x, caller_w;
    if (c.combine_into_caller) {
      auto cx = ep::DeviceTensor::zeros(ep::DType::bf16, my_tokens, hidden);
      if (!cx) return cx.error();
      caller_x = std::move(*cx);
      ca.out_x = caller_x.view;
      if (c.with_topk) {
        auto cw = ep::DeviceTensor::zeros(ep::DType::fp32, my_tokens, topk);
        if (!cw) return cw.error();
        caller_w = std::move(*cw);
        ca.out_topk_weights = caller_w.view;
      }
    }
    ca.handle = kept->handle;
    ca.config.num_sms = s.opts.num_sms;
    ca.order = order->order;
    auto comb = s.buffer->combine(ca);
    if (!comb) return comb.error();
    EPKIT_TRY(finish(s, comb->event, c.async));
    if (c.combine_into_caller) {
      ck.require("combined_x in the caller's memory", comb->combined_x.data == caller_x.view.data,
                 "the result is not where out_x points");
      if (c.with_topk)
        ck.require("combined_topk_weights in the caller's memory",
                   comb->combined_topk_weights.data == caller_w.view.data,
                   "the result is not where out_topk_weights points");
    } else {
      s.last_combine = {comb->combined_x, comb->combined_topk_weights};
    }
    auto got_x = copy_out(comb->combined_x);
    if (!got_x) return got_x.error();
    auto got_w = copy_out(comb->combined_topk_weights);
    if (!got_w) return got_w.error();
    auto ref_c =
        reference_combine(s.nccl, *ref, ref->recv_x.view,
                          c.with_topk ? ref->recv_topk_weights.view : ep::TensorView{}, ca.bias);
    if (!ref_c) return ref_c.error();
    auto ref_cx = copy_out(ref_c->combined_x.view);
    if (!ref_cx) return ref_cx.error();
    ck("combined_x vs reference",
       cf::compare_bytes(*ref_cx, *got_x, static_cast<std::size_t>(hidden) * 2));
    const auto combined = cf::decode_bf16(*got_x);
    if (c.biases > 0) {
      // The sum includes the biases: the bitwise reference above is the check.
    } else if (c.kind == XKind::rank_constant) {
      ck("combined_x == x * ranks reached",
         cf::check_combined_exact(combined, hidden, s.rank, want.token_reach));
    } else {
      auto x = copy_out(inputs->x.view);
      if (!x) return x.error();
      ck("combined_x / ranks reached vs x",
         cf::check_combined_close(combined, cf::decode_bf16(*x), hidden, want.token_reach,
                                  k_combine_limit));
    }
    if (c.with_topk) {
      auto ref_cw = copy_out(ref_c->combined_topk_weights.view);
      if (!ref_cw) return ref_cw.error();
      ck("combined_topk_weights vs reference",
         cf::compare_bytes(*ref_cw, *got_w, static_cast<std::size_t>(topk) * 4));
      ck("combined_topk_weights vs weights",
         cf::check_combined_weights(cf::as_vector<float>(*got_w), host_w, host_idx,
                                    k_weights_limit));
    }
  }

  return {};
}

// Cached dispatch: the handle alone reproduces the rows.
Result<void> CaseRun::check_cached_dispatch() {
  // Cached dispatch: the handle alone reproduces the rows.
  {
    EPKIT_TRY(poison(s, s.last_dispatch));
    auto order = make_order(s, c);
    if (!order) return order.error();
    ep::DispatchArgs cached;
    cached.x = args.x;
    cached.x_scales = args.x_scales;
    cached.handle = kept->handle;
    cached.config = args.config;
    cached.order = order->order;
    auto dc = s.buffer->dispatch(cached);
    if (!dc) return dc.error();
    EPKIT_TRY(finish(s, dc->event, c.async));
    s.last_dispatch = views_of(*dc);
    s.last_dispatch_owner = dc->handle;
    auto x = copy_out(dc->recv_x);
    if (!x) return x.error();
    ck("cached dispatch recv_x", cf::compare_bytes(h.x, *x, h.x_row));
    if (c.fp8) {
      auto sc = copy_out(dc->recv_x_scales);
      if (!sc) return sc.error();
      ck("cached dispatch recv_x_scales", cf::compare_bytes(h.scales, *sc, h.scales_row));
    }
  }

  return {};
}

// num_worst_tokens: padded outputs whose prefix is the normal result.
Result<void> CaseRun::check_worst_tokens() {
  // num_worst_tokens: padded outputs whose prefix is the normal result.
  {
    EPKIT_TRY(poison(s, s.last_dispatch));
    auto order = make_order(s, c);
    if (!order) return order.error();
    ep::DispatchArgs worst = args;
    worst.num_worst_tokens = shape.num_tokens * s.ranks;
    worst.order = order->order;
    auto dw = s.buffer->dispatch(worst);
    if (!dw) return dw.error();
    EPKIT_TRY(finish(s, dw->event, c.async));
    s.last_dispatch = views_of(*dw);
    s.last_dispatch_owner = dw->handle;
    auto w = snapshot(*dw, s.rank);
    if (!w) return w.error();
    ck.require(
        "worst-case rows", w->rows == worst.num_worst_tokens,
        fmt::format("recv_x has {} rows, num_worst_tokens is {}", w->rows, worst.num_worst_tokens));
    ck.require("worst-case per-expert list", w->list.empty(),
               fmt::format("{} entries, expected none", w->list.size()));
    ck("worst-case recv_tokens_per_expert (device)",
       cf::compare_ints(h.list, ints_of(w->tokens_per_expert)));
    ck("worst-case recv_x prefix", cf::compare_prefix(h.x, w->x, h.x_row, rows));
    if (c.fp8) {
      ck("worst-case recv_x_scales prefix",
         cf::compare_prefix(h.scales, w->scales, h.scales_row, rows));
    }
    if (!s.internode)
      ck("worst-case recv_src_idx prefix", cf::compare_prefix(h.src_idx, w->src_idx, 4, rows));
    if (c.with_topk) {
      ck("worst-case recv_topk_idx prefix",
         cf::compare_prefix(h.topk_idx, w->topk_idx, h.idx_row, rows));
      ck("worst-case recv_topk_weights prefix",
         cf::compare_prefix(h.weights, w->weights, h.weights_row, rows));
      ck("worst-case padded recv_topk_idx",
         cf::check_padding(cf::decode_index(w->topk_idx, static_cast<int>(dtype_size(w->idx_type))),
                           topk, static_cast<int>(rows)));
    }
  }
  return {};
}

Result<cf::Verdict> run_case(Suite& s, const CaseSpec& c, int case_no) {
  CaseRun r(s, c, case_no);
  r.topk = r.shape.num_topk;
  r.experts = r.shape.num_experts;
  r.local = r.experts / s.ranks;
  r.hidden = c.hidden;
  EPKIT_TRY(r.make_case_inputs());
  EPKIT_TRY(r.check_layout());
  if (c.layout_only) return r.ck.first;
  EPKIT_TRY(r.dispatch_twice());
  EPKIT_TRY(r.check_counts());
  EPKIT_TRY(r.check_rows());
  EPKIT_TRY(r.check_combine());
  EPKIT_TRY(r.check_cached_dispatch());
  EPKIT_TRY(r.check_worst_tokens());
  return r.ck.first;
}

Result<void> validate(const ConformanceOptions& o, int ranks) {
  const auto& s = o.shape;
  auto bad = [](std::string why) { return make_error(ErrorCode::invalid, std::move(why)); };
  if (s.num_tokens < 1) return bad(fmt::format("--tokens {}: must be at least 1", s.num_tokens));
  if (s.num_topk < 1) return bad(fmt::format("--topk {}: must be at least 1", s.num_topk));
  if (s.num_experts % ranks != 0 || s.num_experts < ranks) {
    return bad(
        fmt::format("--experts {}: must be a multiple of the {} ranks", s.num_experts, ranks));
  }
  if (s.num_topk > s.num_experts) {
    return bad(fmt::format("--topk {} exceeds --experts {}", s.num_topk, s.num_experts));
  }
  std::vector<int> hiddens = o.edge_hidden;
  hiddens.push_back(s.hidden);
  for (int h : hiddens) {
    if (h < 128 || h % 128 != 0) {
      return bad(
          fmt::format("hidden {}: must be a positive multiple of 128 (FP8 scales per "
                      "128 channels)",
                      h));
    }
  }
  return {};
}

// The low-latency cases' shape: the region must hold it, top-k at most 16.
Result<void> validate_low_latency(const ConformanceOptions& o, int ranks) {
  const auto& s = o.shape;
  auto bad = [](std::string why) { return make_error(ErrorCode::invalid, std::move(why)); };
  const int max_topk = ep::testing::low_latency_max_topk();
  if (s.num_topk < 1 || s.num_topk > max_topk || s.num_topk > s.num_experts)
    return bad(fmt::format("--topk {}: the low-latency mode takes 1..{} (and at most --experts)",
                           s.num_topk, max_topk));
  auto shape = ep::testing::check_low_latency_shape(s.num_tokens, s.hidden, ranks, s.num_experts);
  if (!shape) return bad(fmt::format("--mode low-latency: {}", shape.error().message));
  return {};
}

}  // namespace

Result<ConformanceReport> run_conformance(runtime::GpuRank& gpu, const ConformanceOptions& options,
                                          const LineFn& line) {
  auto& session = *gpu.session;
  const int rank = session.rank();
  const int ranks = session.world_size();
  auto step = [&] { return runtime::Deadline::after_seconds(options.timeout_s); };
  auto say = [&](const std::string& text) {
    if (rank == 0 && line) line(text);
  };
  const bool low_latency = options.mode == ConformanceMode::low_latency;
  EPKIT_TRY(low_latency ? validate_low_latency(options, ranks) : validate(options, ranks));
  if (options.flip_bit_rank >= 0 && (low_latency || options.flip_bit_rank >= ranks))
    return make_error(
        ErrorCode::invalid,
        fmt::format("fault injection: rank {} of {} in {} mode (it flips a bit of "
                    "a normal-mode recv_x, on one of the job's ranks)",
                    options.flip_bit_rank, ranks, low_latency ? "low-latency" : "normal"));

  // Rank 0's seed for everyone: under torchrun or srun each process picked
  // its own.
  if (rank == 0) EPKIT_TRY(gpu.store().set("ep/conf/seed", std::to_string(options.seed), step()));
  auto seed_text = gpu.store().get("ep/conf/seed", step());
  if (!seed_text) return seed_text.error();

  Suite s(gpu, options);
  s.seed = std::stoull(*seed_text);
  s.rank = rank;
  s.fault_pending = options.flip_bit_rank == rank && !low_latency;
  s.ranks = ranks;
  Stream stream;
  EPKIT_TRY(stream.create());
  s.stream = stream.get();
  auto comm = session.blocking_comm(step());
  if (!comm) return comm.error();
  s.nccl = NcclContext{&session.api(), *comm, session.stream(), rank, ranks};

  ep::BufferOptions bo;
  // The low-latency cases need no normal-mode rows, only the region.
  bo.max_tokens = low_latency ? 1 : options.shape.num_tokens;
  if (low_latency)
    bo.low_latency_bytes = ep::Buffer::low_latency_size_hint(
        options.shape.num_tokens, options.shape.hidden, ranks, options.shape.num_experts);
  bo.max_hidden =
      std::max(options.shape.hidden,
               options.edge_hidden.empty()
                   ? 0
                   : *std::max_element(options.edge_hidden.begin(), options.edge_hidden.end()));
  bo.max_topk = options.shape.num_topk;
  bo.timeout_s = options.timeout_s;
  // Several nodes: the internode Buffer, nodes of the launch's local ranks.
  const int per_node = gpu.launch.local_world_size;
  if (gpu.launch.nnodes > 1 && per_node > 0 && per_node < ranks) {
    // The low-latency mode across nodes needs the device-driven leg; on
    // NCCL's host leg the Buffer refuses its calls by name.
    bo.ranks_per_node = per_node;
    bo.network_leg = options.network_leg;
    bo.emulated_nic_gbps = options.nic_gbps;
    bo.emulated_nic_latency_us = options.nic_latency_us;
    bo.overlap_network_leg = options.leg_overlap;
    bo.internode_rings = options.rings;
    if (options.ring_rows > 0) {
      // Shrunk rings: a chunk of at most half the rows, so every ring holds
      // two and wraps within a call.
      bo.ring_network_rows = options.ring_rows;
      bo.ring_nvl_rows = options.ring_rows;
      bo.ring_chunk_rows = std::max(1, std::min(bo.ring_chunk_rows, options.ring_rows / 2));
    }
    s.internode = true;
    s.nccl.ranks_per_node = per_node;
  }
  StoreBootstrap bootstrap(gpu.store(), rank, ranks, "ep/conf/buffer",
                           runtime::Millis(static_cast<std::int64_t>(options.timeout_s * 1000)));
  auto buffer = ep::Buffer::create(bootstrap, bo);
  if (!buffer) return buffer.error();
  s.buffer = buffer->get();

  ConformanceReport report;
  report.ranks = ranks;
  report.seed = s.seed;
  const auto& sh = options.shape;
  say(fmt::format(
      "[config] {}num_tokens={}, hidden={}, num_topk={}, num_experts={}, ranks={}{}, "
      "num_sms={}, seed={}",
      low_latency ? "mode=low-latency, " : "", sh.num_tokens, sh.hidden, sh.num_topk,
      sh.num_experts, ranks,
      s.internode ? fmt::format(" ({} nodes x {})", ranks / bo.ranks_per_node, bo.ranks_per_node)
                  : "",
      options.num_sms, s.seed));
  if (s.internode) say(fmt::format("[network] {}", s.buffer->network()));
  if (low_latency) say(fmt::format("[buffer] low-latency region: {} bytes", bo.low_latency_bytes));

  // The cases of the mode, by name, and how to run the n-th.
  std::vector<std::string> names;
  std::function<Result<cf::Verdict>(int)> run_one;
  std::vector<CaseSpec> cases;
  std::vector<LowLatencyCase> low_latency_specs;
  LowLatencySuite low_latency_suite;
  if (low_latency) {
    low_latency_suite.session = &session;
    low_latency_suite.nccl = s.nccl;
    low_latency_suite.buffer = s.buffer;
    low_latency_suite.stream = s.stream;
    low_latency_suite.options = &options;
    low_latency_suite.seed = s.seed;
    low_latency_suite.rank = rank;
    low_latency_suite.ranks = ranks;
    auto x = ep::DeviceMemory::allocate(static_cast<std::size_t>(sh.num_experts) * sh.num_tokens *
                                        sh.hidden * 2);
    if (!x) return x.error();
    low_latency_suite.combine_x = std::move(*x);
    low_latency_specs = low_latency_cases(options, ranks);
    for (const auto& c : low_latency_specs) names.push_back(c.name);
    run_one = [&](int n) {
      return run_low_latency_case(low_latency_suite, low_latency_specs[static_cast<std::size_t>(n)],
                                  n);
    };
  } else {
    cases = intranode_cases(options, ranks);
    for (const auto& c : cases) names.push_back(c.name);
    run_one = [&](int n) { return run_case(s, cases[static_cast<std::size_t>(n)], n); };
  }
  for (std::size_t n = 0; n < names.size(); ++n) {
    const std::string& name = names[n];
    auto verdict = run_one(static_cast<int>(n));
    if (!verdict) return verdict.error();
    // Every rank's verdict, so the case fails everywhere if it failed anywhere.
    const std::string key = fmt::format("ep/conf/verdict/{}/", n);
    EPKIT_TRY(gpu.store().set(key + std::to_string(rank), verdict->value_or(""), step()));
    std::vector<ConformanceFailure> failures;
    for (int q = 0; q < ranks; ++q) {
      auto text = gpu.store().get(key + std::to_string(q), step());
      if (!text) return text.error();
      if (!text->empty()) failures.push_back({name, q, *text});
    }
    ++report.cases;
    if (failures.empty()) {
      ++report.passed;
      say(name + " ... passed");
      continue;
    }
    ++report.failed;
    say(fmt::format(
        "{} ... FAILED on rank {}: {}{}", name, failures.front().rank, failures.front().detail,
        failures.size() == 1 ? "" : fmt::format(" (and {} more ranks)", failures.size() - 1)));
    report.failures.insert(report.failures.end(), failures.begin(), failures.end());
  }
  EPKIT_TRY(s.buffer->barrier());
  // A fault that was never injected would let the suite's own test pass on
  // a run that checked nothing of it.
  if (s.fault_pending)
    return make_error(ErrorCode::internal,
                      fmt::format("fault injection: rank {} received no rows in any case, so no "
                                  "bit was flipped",
                                  rank));
  return report;
}

}  // namespace epkit::harness
