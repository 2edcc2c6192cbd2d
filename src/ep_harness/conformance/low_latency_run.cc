#include "ep_harness/conformance/low_latency_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "base/cuda_error.h"
#include "ep_harness/conformance_gather.h"
#include "ep_harness/low_latency_inputs.h"
#include "ep_harness/low_latency_reference.h"

namespace epkit::harness {
namespace {

namespace cf = conformance;
namespace ref = low_latency_reference;
using Bytes = std::vector<std::uint8_t>;

// DeepEP's combine tolerances (test_low_latency.py), unchecked with round_scale.
constexpr double k_bf16_combine_limit = 1e-5;
constexpr double k_fp8_combine_limit = 9e-4;

// Host to device on the suite's stream: the engine orders itself after it
// (a pageable cudaMemcpy may return before the data landed).
Result<void> copy_in(const LowLatencySuite& s, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return {};
  EPKIT_TRY(cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s.stream),
                    "cudaMemcpyAsync"));
  return cuda_ok(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");
}

Result<Bytes> copy_out(const void* src, std::size_t bytes) {
  Bytes out(bytes);
  if (bytes != 0)
    EPKIT_TRY(cuda_ok(cudaMemcpy(out.data(), src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy"));
  return out;
}

template <typename T>
Result<ep::DeviceMemory> device_copy(const LowLatencySuite& s, const std::vector<T>& host) {
  auto m = ep::DeviceMemory::allocate(host.size() * sizeof(T));
  if (!m) return m.error();
  EPKIT_TRY(copy_in(s, m->get(), host.data(), host.size() * sizeof(T)));
  return m;
}

template <typename T>
Bytes bytes_of(const T* data, std::size_t count) {
  Bytes b(count * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), data, b.size());
  return b;
}

// Every output is filled with 0xFF bytes after it was read: a later call
// that leaves it unwritten cannot pass on stale data.
Result<void> poison(const std::vector<ep::TensorView>& views) {
  for (const auto& v : views) {
    if (v.data == nullptr || v.numel() == 0) continue;
    const auto bytes = static_cast<std::size_t>(v.numel()) * dtype_size(v.dtype);
    EPKIT_TRY(cuda_ok(cudaMemset(v.data, 0xff, bytes), "poisoning " + v.describe()));
  }
  return cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize after poisoning");
}

struct Mode {
  bool fp8 = false;
  bool round_scale = false;
  bool ue8m0 = false;
};

Mode mode_of(const LowLatencyCase& c) {
  return {c.fp8, c.fp8 && c.round_scale, c.fp8 && c.round_scale && c.ue8m0};
}

// One input set on this rank, on the device and all-gathered, with what
// every rank's tokens look like after the dispatch (cast) and as the
// experts return them (cast and back: DeepEP's simulated GEMM).
struct Inputs {
  LowLatencyInputs mine;
  int tokens = 0;
  ep::DeviceMemory x, idx, weights;
  ep::TensorView x_view, idx_view, weights_view;
  cf::GatheredRouting routing;
  std::vector<std::vector<std::uint16_t>> xs;    // by rank: [tokens, hidden]
  std::vector<std::vector<std::uint8_t>> fp8;    // by rank: the cast rows (FP8)
  std::vector<std::vector<float>> scales;        // by rank: [tokens, hidden / 128]
  std::vector<std::vector<std::uint16_t>> back;  // by rank: what the experts return
  ref::ExpectedDispatch want;
};

Result<Inputs> make_inputs(LowLatencySuite& s, const LowLatencyCase& c, int case_no, int set) {
  const auto& sh = s.options->shape;
  const int max_tokens = sh.num_tokens;
  const int hidden = sh.hidden;
  const int topk = sh.num_topk;
  Inputs in;
  LowLatencyInputOptions o;
  o.num_tokens = in.tokens = c.zero_tokens_rank == s.rank ? 0 : max_tokens;
  o.hidden = hidden;
  o.num_topk = topk;
  o.num_experts = sh.num_experts;
  o.rank = s.rank;
  o.rank_constant = c.rank_constant;
  o.seed = s.seed + static_cast<std::uint64_t>(case_no) * 2 + static_cast<std::uint64_t>(set);
  o.mask_all = c.masked_rank == s.rank;
  in.mine = make_low_latency_inputs(o);
  const int tokens = in.tokens;

  auto x = device_copy(s, in.mine.x);
  if (!x) return x.error();
  in.x = std::move(*x);
  in.x_view = ep::TensorView::matrix(in.x.get(), ep::DType::bf16, tokens, hidden);
  if (c.topk32) {
    std::vector<std::int32_t> narrow(in.mine.topk_idx.begin(), in.mine.topk_idx.end());
    auto idx = device_copy(s, narrow);
    if (!idx) return idx.error();
    in.idx = std::move(*idx);
  } else {
    auto idx = device_copy(s, in.mine.topk_idx);
    if (!idx) return idx.error();
    in.idx = std::move(*idx);
  }
  in.idx_view = ep::TensorView::matrix(in.idx.get(), c.topk32 ? ep::DType::int32 : ep::DType::int64,
                                       tokens, topk);
  auto w = device_copy(s, in.mine.topk_weights);
  if (!w) return w.error();
  in.weights = std::move(*w);
  in.weights_view = ep::TensorView::matrix(in.weights.get(), ep::DType::fp32, tokens, topk);

  // Every rank's routing and rows, padded to the largest token count.
  const std::string tag = fmt::format("ep/conf/low-latency/{}/{}", case_no, set);
  const auto per_idx = static_cast<std::size_t>(max_tokens * topk);
  const auto per_x = static_cast<std::size_t>(max_tokens) * static_cast<std::size_t>(hidden);
  std::vector<std::int64_t> idx(per_idx, -1);
  std::vector<float> weights(per_idx, 0.0f);
  std::vector<std::uint16_t> rows(per_x, 0);
  std::copy(in.mine.topk_idx.begin(), in.mine.topk_idx.end(), idx.begin());
  std::copy(in.mine.topk_weights.begin(), in.mine.topk_weights.end(), weights.begin());
  std::copy(in.mine.x.begin(), in.mine.x.end(), rows.begin());
  auto counts = gather_all(*s.session, s.nccl, std::vector<std::int64_t>{tokens}, ncclInt64,
                           tag + "/tokens", s.step());
  if (!counts) return counts.error();
  auto all_idx = gather_all(*s.session, s.nccl, idx, ncclInt64, tag + "/topk_idx", s.step());
  if (!all_idx) return all_idx.error();
  auto all_w = gather_all(*s.session, s.nccl, weights, ncclFloat32, tag + "/weights", s.step());
  if (!all_w) return all_w.error();
  auto all_x = gather_all(*s.session, s.nccl, rows, ncclFloat16, tag + "/x", s.step());
  if (!all_x) return all_x.error();

  auto& g = in.routing;
  g.num_ranks = s.ranks;
  g.num_experts = sh.num_experts;
  g.num_topk = topk;
  const int scales = hidden / 128;
  const Mode mode = mode_of(c);
  for (int r = 0; r < s.ranks; ++r) {
    const auto n = static_cast<std::size_t>((*counts)[static_cast<std::size_t>(r)]);
    const auto at = static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * per_idx);
    const auto xat = static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * per_x);
    const auto nk = static_cast<std::ptrdiff_t>(n * static_cast<std::size_t>(topk));
    const auto nh = static_cast<std::ptrdiff_t>(n * static_cast<std::size_t>(hidden));
    g.num_tokens.push_back(static_cast<int>(n));
    g.topk_idx.emplace_back(all_idx->begin() + at, all_idx->begin() + at + nk);
    g.topk_weights.emplace_back(all_w->begin() + at, all_w->begin() + at + nk);
    in.xs.emplace_back(all_x->begin() + xat, all_x->begin() + xat + nh);
    auto& f = in.fp8.emplace_back();
    auto& sc = in.scales.emplace_back();
    auto& back = in.back.emplace_back(in.xs.back());
    if (!mode.fp8) continue;
    f.resize(static_cast<std::size_t>(nh));
    sc.resize(n * static_cast<std::size_t>(scales));
    for (std::size_t t = 0; t < n; ++t) {
      const std::size_t row = t * static_cast<std::size_t>(hidden);
      ref::cast_row(in.xs.back().data() + row, hidden, mode.round_scale, f.data() + row,
                    sc.data() + t * static_cast<std::size_t>(scales));
      ref::dequantize_row(f.data() + row, sc.data() + t * static_cast<std::size_t>(scales), hidden,
                          back.data() + row);
    }
  }
  in.want = ref::expected_dispatch(g, s.rank, max_tokens);
  return in;
}

// What one dispatch left on this rank: its valid rows, per local expert.
struct Received {
  std::vector<int> recv_count;
  std::vector<std::int64_t> layout_range;
  std::vector<int> stats;
  std::vector<Bytes> rows;                 // [count * row bytes]
  std::vector<std::vector<float>> scales;  // [count * hidden / 128], row-major (FP8)
  std::vector<std::vector<int>> src_info;  // [count]
};

Result<Received> read_dispatch(const ep::LowLatencyDispatchResult& d, const Inputs& in,
                               const ep::DeviceMemory& stats, const Mode& mode) {
  Received got;
  const auto L = static_cast<std::size_t>(in.want.local_experts);
  const auto R = static_cast<std::size_t>(in.routing.num_ranks);
  auto count = copy_out(d.recv_count.data, L * 4);
  if (!count) return count.error();
  got.recv_count = cf::as_vector<int>(*count);
  auto range = copy_out(d.handle.layout_range.data, L * R * 8);
  if (!range) return range.error();
  got.layout_range = cf::as_vector<std::int64_t>(*range);
  auto st = copy_out(stats.get(), L * 4);
  if (!st) return st.error();
  got.stats = cf::as_vector<int>(*st);
  const auto elem = dtype_size(d.recv_x.dtype);
  const auto row_bytes = static_cast<std::size_t>(d.recv_x.cols()) * elem;
  const auto RM = static_cast<std::size_t>(d.recv_x.shape[1]);
  for (std::size_t le = 0; le < L; ++le) {
    // The expected count: a wrong recv_count is reported on its own.
    const auto n = std::min<std::size_t>(static_cast<std::size_t>(in.want.recv_count[le]), RM);
    const auto* x = static_cast<const std::uint8_t*>(d.recv_x.data) +
                    le * static_cast<std::size_t>(d.recv_x.strides[0]) * elem;
    auto rows = copy_out(x, n * row_bytes);
    if (!rows) return rows.error();
    got.rows.push_back(std::move(*rows));
    auto src = copy_out(static_cast<const int*>(d.handle.src_info.data) + le * RM, n * 4);
    if (!src) return src.error();
    got.src_info.push_back(cf::as_vector<int>(*src));
    auto& scales = got.scales.emplace_back();
    if (!mode.fp8) continue;
    // Column-major per expert: [columns][RM] words.
    const auto cols = static_cast<std::size_t>(d.recv_x_scales.shape[2]);
    auto block = copy_out(static_cast<const std::uint32_t*>(d.recv_x_scales.data) + le * cols * RM,
                          cols * RM * 4);
    if (!block) return block.error();
    const auto words = cf::as_vector<std::uint32_t>(*block);
    const std::size_t per_row = mode.ue8m0 ? cols * 4 : cols;
    scales.resize(n * per_row);
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t q = 0; q < cols; ++q) {
        const std::uint32_t w = words[q * RM + r];
        if (!mode.ue8m0) {
          scales[r * per_row + q] = std::bit_cast<float>(w);
          continue;
        }
        for (std::size_t j = 0; j < 4; ++j)  // 2^(byte - 127)
          scales[r * per_row + 4 * q + j] = std::bit_cast<float>(((w >> (8 * j)) & 0xffu) << 23);
      }
  }
  return got;
}

void check_dispatch(cf::Checks& ck, const std::string& run, const Received& got, const Inputs& in,
                    const LowLatencyCase& c, int hidden) {
  const Mode mode = mode_of(c);
  const auto& want = in.want;
  ck(run + "recv_count", cf::compare_ints(want.recv_count, got.recv_count));
  ck(run + "layout_range", cf::compare_ints(want.layout_range, got.layout_range));
  ck(run + "cumulative_local_expert_recv_stats", cf::compare_ints(want.recv_count, got.stats));
  const auto h = static_cast<std::size_t>(hidden);
  const std::size_t S = h / 128;
  const auto R = static_cast<std::size_t>(in.routing.num_ranks);
  for (std::size_t le = 0; le < want.rows.size(); ++le) {
    const std::string where = fmt::format("{}expert {} ", run, le);
    const auto& sources = want.rows[le];
    std::vector<int> tokens;
    Bytes rows;
    std::vector<float> scales;
    for (const auto& src : sources) {
      tokens.push_back(src.token);
      const auto r = static_cast<std::size_t>(src.rank);
      const auto t = static_cast<std::size_t>(src.token);
      if (mode.fp8) {
        rows.insert(rows.end(), in.fp8[r].begin() + static_cast<std::ptrdiff_t>(t * h),
                    in.fp8[r].begin() + static_cast<std::ptrdiff_t>((t + 1) * h));
        scales.insert(scales.end(), in.scales[r].begin() + static_cast<std::ptrdiff_t>(t * S),
                      in.scales[r].begin() + static_cast<std::ptrdiff_t>((t + 1) * S));
      } else {
        const Bytes b = bytes_of(in.xs[r].data() + t * h, h);
        rows.insert(rows.end(), b.begin(), b.end());
      }
    }
    ck(where + "src_info", cf::compare_ints(tokens, got.src_info[le]));
    ck(where + "recv_x", cf::compare_bytes(rows, got.rows[le], mode.fp8 ? h : 2 * h));
    if (mode.fp8)
      ck(where + "recv_x_scales",
         cf::compare_bytes(bytes_of(scales.data(), scales.size()),
                           bytes_of(got.scales[le].data(), got.scales[le].size()), S * 4));
    if (!c.rank_constant || got.rows[le].size() != rows.size()) continue;
    // DeepEP's own checks on the values a GEMM would see.
    std::vector<float> values(sources.size() * h);
    std::vector<std::uint16_t> row(h);
    for (std::size_t i = 0; i < sources.size(); ++i) {
      if (mode.fp8) {
        ref::dequantize_row(got.rows[le].data() + i * h, got.scales[le].data() + i * S, hidden,
                            row.data());
      } else {
        std::memcpy(row.data(), got.rows[le].data() + i * 2 * h, 2 * h);
      }
      for (std::size_t j = 0; j < h; ++j) values[i * h + j] = cf::bf16_to_float(row[j]);
    }
    const std::vector<std::int64_t> ranges(
        got.layout_range.begin() + static_cast<std::ptrdiff_t>(le * R),
        got.layout_range.begin() + static_cast<std::ptrdiff_t>((le + 1) * R));
    ck(where + "DeepEP's rank-constant checks",
       ref::deepep_rank_constant_check(values, hidden, got.src_info[le], ranges, mode.round_scale));
  }
}

void compare_runs(cf::Checks& ck, const Received& a, const Received& b) {
  ck("run-to-run recv_count", cf::compare_ints(a.recv_count, b.recv_count));
  ck("run-to-run layout_range", cf::compare_ints(a.layout_range, b.layout_range));
  for (std::size_t le = 0; le < a.rows.size() && le < b.rows.size(); ++le) {
    ck(fmt::format("run-to-run expert {} recv_x", le),
       cf::compare_bytes(a.rows[le], b.rows[le], 1));
    ck(fmt::format("run-to-run expert {} scales", le),
       cf::compare_bytes(bytes_of(a.scales[le].data(), a.scales[le].size()),
                         bytes_of(b.scales[le].data(), b.scales[le].size()), 4));
  }
}

std::vector<ep::TensorView> views_of(const ep::LowLatencyDispatchResult& d) {
  return {d.recv_x, d.recv_x_scales, d.recv_count, d.handle.src_info, d.handle.layout_range};
}

// Waits for an operation as DeepEP's test does: the hook, or the event of an
// async call; then any engine failure is reported.
Result<void> complete(LowLatencySuite& s, ep::LowLatencyHook& hook, const ep::Event& event,
                      bool hooked) {
  if (hooked) {
    EPKIT_TRY(hook());
  } else {
    EPKIT_TRY(event.synchronize());
  }
  EPKIT_TRY(cuda_ok(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize"));
  return s.buffer->synchronize();
}

ep::LowLatencyDispatchArgs dispatch_args(LowLatencySuite& s, const LowLatencyCase& c,
                                         const Inputs& in, ep::DeviceMemory& stats) {
  ep::LowLatencyDispatchArgs a;
  a.x = in.x_view;
  a.topk_idx = in.idx_view;
  a.num_max_dispatch_tokens_per_rank = s.options->shape.num_tokens;
  a.num_experts = s.options->shape.num_experts;
  const Mode mode = mode_of(c);
  a.use_fp8 = mode.fp8;
  a.round_scale = mode.round_scale;
  a.use_ue8m0 = mode.ue8m0;
  a.cumulative_local_expert_recv_stats =
      ep::TensorView::vector(stats.get(), ep::DType::int32, in.want.local_experts);
  a.return_recv_hook = c.hook;
  a.num_sms = s.options->num_sms;
  a.order.stream = s.stream;
  a.order.async = !c.hook;
  return a;
}

Result<ep::DeviceMemory> zeroed(std::size_t bytes) {
  auto m = ep::DeviceMemory::allocate(bytes);
  if (!m) return m.error();
  if (bytes != 0) EPKIT_TRY(cuda_ok(cudaMemset(m->get(), 0, bytes), "cudaMemset"));
  return m;
}

// The expert outputs of a dispatch's valid rows, written into `base`
// ([local experts, ranks * tokens, hidden] BF16): each row returns its token.
Result<void> write_expert_outputs(const LowLatencySuite& s, void* base, const Inputs& in,
                                  int hidden) {
  const auto h = static_cast<std::size_t>(hidden);
  const auto RM = static_cast<std::size_t>(in.want.rows_per_expert);
  std::vector<std::uint16_t> rows;
  for (std::size_t le = 0; le < in.want.rows.size(); ++le) {
    rows.clear();
    for (const auto& src : in.want.rows[le]) {
      const auto& back = in.back[static_cast<std::size_t>(src.rank)];
      const auto at = static_cast<std::ptrdiff_t>(static_cast<std::size_t>(src.token) * h);
      rows.insert(rows.end(), back.begin() + at,
                  back.begin() + at + static_cast<std::ptrdiff_t>(h));
    }
    EPKIT_TRY(
        copy_in(s, static_cast<std::uint16_t*>(base) + le * RM * h, rows.data(), rows.size() * 2));
  }
  return {};
}

void check_combined(cf::Checks& ck, const std::string& what, const Bytes& got, const Inputs& in,
                    int rank, const LowLatencyCase& c, int hidden) {
  const auto& g = in.routing;
  const auto& mine = in.mine;
  const auto want =
      ref::expected_combine(in.back[static_cast<std::size_t>(rank)], mine.topk_idx,
                            mine.topk_weights, in.tokens, g.num_topk, g.num_experts, hidden);
  ck(what + " vs reference", cf::compare_bytes(bytes_of(want.data(), want.size()), got,
                                               static_cast<std::size_t>(hidden) * 2));
  // DeepEP's check: no NaN, and no tolerance with round_scale.
  const Mode mode = mode_of(c);
  const double limit = mode.round_scale ? std::numeric_limits<double>::infinity()
                       : mode.fp8       ? k_fp8_combine_limit
                                        : k_bf16_combine_limit;
  std::vector<float> x(mine.x.size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = cf::bf16_to_float(mine.x[i]);
  ck(what + " (DeepEP's check)",
     ref::deepep_combine_check(cf::decode_bf16(got), x, mine.topk_idx, mine.topk_weights,
                               g.num_topk, g.num_experts, hidden, limit));
}

// One combine of a dispatch's rows (each returning its token), from the
// suite's tensor into `out`, or zero-copy into the Buffer's own output.
// With a hook the hook is left to the caller (`pending`).
Result<ep::LowLatencyCombineResult> start_combine(LowLatencySuite& s, const LowLatencyCase& c,
                                                  const Inputs& in,
                                                  const ep::LowLatencyDispatchResult& d,
                                                  bool zero_copy, ep::DeviceMemory& out) {
  const int hidden = s.options->shape.hidden;
  ep::LowLatencyCombineArgs a;
  if (zero_copy) {
    auto buffer = s.buffer->get_next_low_latency_combine_buffer(d.handle);
    if (!buffer) return buffer.error();
    EPKIT_TRY(write_expert_outputs(s, buffer->data, in, hidden));
  } else {
    EPKIT_TRY(write_expert_outputs(s, s.combine_x.get(), in, hidden));
    a.x = ep::TensorView::tensor3(s.combine_x.get(), ep::DType::bf16, in.want.local_experts,
                                  in.want.rows_per_expert, hidden);
    auto o = ep::DeviceMemory::allocate(static_cast<std::size_t>(in.tokens) * hidden * 2);
    if (!o) return o.error();
    out = std::move(*o);
    EPKIT_TRY(poison({ep::TensorView::matrix(out.get(), ep::DType::bf16, in.tokens, hidden)}));
    a.out = ep::TensorView::matrix(out.get(), ep::DType::bf16, in.tokens, hidden);
  }
  a.zero_copy = zero_copy;
  a.topk_idx = in.idx_view;
  a.topk_weights = in.weights_view;
  a.handle = d.handle;
  a.return_recv_hook = c.hook;
  a.num_sms = s.options->num_sms;
  a.order.stream = s.stream;
  a.order.async = !c.hook;
  return s.buffer->low_latency_combine(a);
}

Result<void> finish_combine(LowLatencySuite& s, cf::Checks& ck, const std::string& what,
                            ep::LowLatencyCombineResult& r, const Inputs& in,
                            const LowLatencyCase& c) {
  EPKIT_TRY(complete(s, r.hook, r.event, c.hook));
  const int hidden = s.options->shape.hidden;
  auto got = copy_out(r.combined_x.data, static_cast<std::size_t>(in.tokens) * hidden * 2);
  if (!got) return got.error();
  check_combined(ck, what, *got, in, s.rank, c, hidden);
  return poison({r.combined_x});
}

struct Dispatched {
  ep::LowLatencyDispatchResult result;
  ep::DeviceMemory stats;
};

Result<Dispatched> start_dispatch(LowLatencySuite& s, const LowLatencyCase& c, const Inputs& in) {
  Dispatched d;
  auto stats = zeroed(static_cast<std::size_t>(in.want.local_experts) * 4);
  if (!stats) return stats.error();
  d.stats = std::move(*stats);
  auto r = s.buffer->low_latency_dispatch(dispatch_args(s, c, in, d.stats));
  if (!r) return r.error();
  d.result = std::move(*r);
  return d;
}

// Two micro-batches: both dispatches in flight before either hook, then
// both combines (one from a tensor, one zero-copy) likewise.
Result<cf::Verdict> run_two_in_flight(LowLatencySuite& s, const LowLatencyCase& c, int case_no) {
  cf::Checks ck;
  const int hidden = s.options->shape.hidden;
  auto in0 = make_inputs(s, c, case_no, 0);
  if (!in0) return in0.error();
  auto in1 = make_inputs(s, c, case_no, 1);
  if (!in1) return in1.error();
  auto d0 = start_dispatch(s, c, *in0);
  if (!d0) return d0.error();
  auto d1 = start_dispatch(s, c, *in1);
  if (!d1) return d1.error();
  EPKIT_TRY(complete(s, d0->result.hook, d0->result.event, true));
  EPKIT_TRY(complete(s, d1->result.hook, d1->result.event, true));
  const Mode mode = mode_of(c);
  auto got0 = read_dispatch(d0->result, *in0, d0->stats, mode);
  if (!got0) return got0.error();
  auto got1 = read_dispatch(d1->result, *in1, d1->stats, mode);
  if (!got1) return got1.error();
  check_dispatch(ck, "first batch ", *got0, *in0, c, hidden);
  check_dispatch(ck, "second batch ", *got1, *in1, c, hidden);
  ep::DeviceMemory out0, out1;
  auto c0 = start_combine(s, c, *in0, d0->result, false, out0);
  if (!c0) return c0.error();
  auto c1 = start_combine(s, c, *in1, d1->result, true, out1);
  if (!c1) return c1.error();
  EPKIT_TRY(finish_combine(s, ck, "first batch combined_x", *c0, *in0, c));
  EPKIT_TRY(finish_combine(s, ck, "second batch combined_x", *c1, *in1, c));
  EPKIT_TRY(poison(views_of(d0->result)));
  EPKIT_TRY(poison(views_of(d1->result)));
  return ck.first;
}

}  // namespace

Result<cf::Verdict> run_low_latency_case(LowLatencySuite& s, const LowLatencyCase& c, int case_no) {
  const auto& sh = s.options->shape;
  if (c.clean_first)
    EPKIT_TRY(s.buffer->clean_low_latency_buffer(sh.num_tokens, sh.hidden, sh.num_experts));
  if (c.two_in_flight) return run_two_in_flight(s, c, case_no);
  cf::Checks ck;
  auto in = make_inputs(s, c, case_no, 0);
  if (!in) return in.error();
  const Mode mode = mode_of(c);
  // Two dispatches of the same inputs (they use the two buffers in turn):
  // each checked, and equal bitwise.
  std::optional<Received> first;
  std::optional<Dispatched> kept;
  for (int run = 0; run < 2; ++run) {
    auto d = start_dispatch(s, c, *in);
    if (!d) return d.error();
    EPKIT_TRY(complete(s, d->result.hook, d->result.event, c.hook));
    auto got = read_dispatch(d->result, *in, d->stats, mode);
    if (!got) return got.error();
    check_dispatch(ck, fmt::format("dispatch {} ", run + 1), *got, *in, c, sh.hidden);
    if (run == 0) {
      first = std::move(*got);
      EPKIT_TRY(poison(views_of(d->result)));
    } else {
      compare_runs(ck, *first, *got);
      kept = std::move(*d);
    }
  }
  ep::DeviceMemory out;
  auto from_tensor = start_combine(s, c, *in, kept->result, false, out);
  if (!from_tensor) return from_tensor.error();
  EPKIT_TRY(finish_combine(s, ck, "combined_x (zero_copy=False, out=)", *from_tensor, *in, c));
  ep::DeviceMemory unused;
  auto zero_copy = start_combine(s, c, *in, kept->result, true, unused);
  if (!zero_copy) return zero_copy.error();
  EPKIT_TRY(finish_combine(s, ck, "combined_x (zero_copy=True)", *zero_copy, *in, c));
  EPKIT_TRY(poison(views_of(kept->result)));
  return ck.first;
}

}  // namespace epkit::harness
