// `epkit bench ep --mode low-latency` on every rank (low_latency_run.h): the data
// checks, then DeepEP-style timing with CUDA events on the caller's stream.
#include "ep_harness/bench/low_latency_run.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <utility>

#include "base/cuda_error.h"
#include "ep/testing.h"
#include "ep_harness/bench/timing.h"
#include "ep_harness/bench/verdicts.h"
#include "ep_harness/conformance_checks.h"
#include "ep_harness/store_bootstrap.h"
#include "runtime/peer_json.h"

namespace epkit::harness {

using ep::DType;
using ep::TensorView;
using runtime::Deadline;
namespace cf = conformance;

EpLowLatencyInputs make_ep_low_latency_inputs(const bench::EpLowLatencyShape& s, std::uint64_t seed,
                                              int rank) {
  std::mt19937_64 rng(seed * 1000003ULL + static_cast<std::uint64_t>(rank) + 1);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  EpLowLatencyInputs in;
  const auto tokens = static_cast<std::size_t>(s.tokens);
  const auto hidden = static_cast<std::size_t>(s.hidden);
  const auto topk = static_cast<std::size_t>(s.topk);
  in.x.resize(tokens * hidden);
  // DeepEP's last input scale (randn * 0.1): the FP8 error bound assumes it.
  for (auto& v : in.x) v = cf::float_to_bf16(normal(rng) * 0.1F);
  in.topk_idx.resize(tokens * topk);
  std::vector<std::int64_t> experts(static_cast<std::size_t>(s.experts));
  std::iota(experts.begin(), experts.end(), 0);
  for (std::size_t t = 0; t < tokens; ++t) {
    // The first topk of a partial shuffle: distinct experts.
    for (std::size_t k = 0; k < topk; ++k) {
      std::uniform_int_distribution<std::size_t> pick(k, experts.size() - 1);
      std::swap(experts[k], experts[pick(rng)]);
      in.topk_idx[t * topk + k] = experts[k];
    }
  }
  // A few unused slots, as DeepEP's test sets ten.
  std::uniform_int_distribution<std::size_t> slot(0, in.topk_idx.size() - 1);
  for (int i = 0; i < 10 && !in.topk_idx.empty(); ++i) in.topk_idx[slot(rng)] = -1;
  in.topk_weights.resize(tokens * topk);
  for (auto& w : in.topk_weights) w = std::abs(normal(rng));
  return in;
}

Result<std::unique_ptr<ep::Buffer>> make_ep_low_latency_buffer(runtime::GpuRank& rank,
                                                               const EpLowLatencyBenchOptions& o) {
  StoreBootstrap boot(rank.store(), rank.launch.rank, rank.launch.world_size,
                      "epbench-low-latency/buffer",
                      runtime::Millis(static_cast<std::int64_t>(o.timeout_s * 1000.0)));
  ep::BufferOptions bo;
  // The normal heap is not used; the smallest shape keeps it small.
  bo.max_tokens = 1;
  bo.max_hidden = o.shape.hidden;
  bo.max_topk = o.shape.topk;
  bo.timeout_s = o.timeout_s;
  bo.low_latency_bytes = ep::Buffer::low_latency_size_hint(o.shape.tokens, o.shape.hidden,
                                                           rank.launch.world_size, o.shape.experts);
  const runtime::LaunchInfo& launch = rank.launch;
  if (launch.nnodes > 1 && launch.local_world_size > 0 &&
      launch.local_world_size < launch.world_size) {
    // Across nodes: rows to this node's ranks over NVLink, the others' over
    // the leg (the NCCL host leg refuses the mode by name).
    bo.ranks_per_node = launch.local_world_size;
    if (o.emulated_nic) {
      bo.network_leg = ep::BufferOptions::NetworkLeg::emulated_nic;
      bo.emulated_nic_gbps = o.nic_gbps;
      bo.emulated_nic_latency_us = o.nic_latency_us;
    }
  }
  return ep::Buffer::create(boot, bo);
}

namespace {

using detail::CheckSpec;
constexpr CheckSpec k_checks[] = {
    {"recv_count", "per local expert, the (token, k) pairs routed to it by every rank; FP8, BF16"},
    {"dispatch (BF16)", "every row bitwise equal to its source row; src_info, layout_range"},
    {"dispatch (FP8)", "src_info, layout_range; dequantized rows calc_diff < 9e-4"},
    {"combine (BF16)", "sum_k w_k x against the host's, calc_diff < 1e-5"},
    {"combine (FP8)", "sum_k w_k x against the host's, calc_diff < 9e-4"},
};
constexpr std::size_t k_num_checks = std::size(k_checks);
enum CheckIndex : std::size_t { c_count, c_bf16, c_fp8, c_comb_bf16, c_comb_fp8 };

void note(std::string& verdict, const std::string& message) {
  if (verdict.empty()) verdict = message;
}

Result<void> memcpy_d2h(void* to, const void* from, std::size_t bytes) {
  return cuda_ok(cudaMemcpy(to, from, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (to host)");
}

template <typename T>
Result<std::vector<T>> read(const TensorView& v) {
  auto bytes = ep::to_host(v);
  if (!bytes) return bytes.error();
  std::vector<T> out(bytes->size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), bytes->data(), out.size() * sizeof(T));
  return out;
}

// What one rank's checks of one dispatch dtype need from every rank.
struct Routing {
  int me = 0;
  int world = 1;
  int local_experts = 1;
  const bench::EpLowLatencyShape* shape = nullptr;
  std::vector<EpLowLatencyInputs> all;  // every rank's inputs
  // tokens[le][r]: rank r's tokens routed to local expert le, ascending.
  std::vector<std::vector<std::vector<int>>> tokens;
};

Routing make_routing(const bench::EpLowLatencyShape& s, std::uint64_t seed, int me, int world) {
  Routing r;
  r.me = me;
  r.world = world;
  r.local_experts = s.experts / world;
  r.shape = &s;
  for (int q = 0; q < world; ++q) r.all.push_back(make_ep_low_latency_inputs(s, seed, q));
  r.tokens.assign(static_cast<std::size_t>(r.local_experts),
                  std::vector<std::vector<int>>(static_cast<std::size_t>(world)));
  const std::int64_t first = static_cast<std::int64_t>(me) * r.local_experts;
  for (int q = 0; q < world; ++q) {
    const auto& idx = r.all[static_cast<std::size_t>(q)].topk_idx;
    for (int t = 0; t < s.tokens; ++t) {
      for (int k = 0; k < s.topk; ++k) {
        const std::int64_t e = idx[static_cast<std::size_t>(t * s.topk + k)];
        if (e >= first && e < first + r.local_experts) {
          r.tokens[static_cast<std::size_t>(e - first)][static_cast<std::size_t>(q)].push_back(t);
        }
      }
    }
  }
  return r;
}

// The received rows of one dispatch, expert by expert, as BF16 bits: the
// rows themselves, or FP8 rows times their scales rounded to BF16
// (DeepEP's per_token_cast_back). Rows the dispatch did not fill are zero.
struct Received {
  std::vector<int> recv_count;
  std::vector<std::int64_t> layout_range;  // [le, r]
  std::vector<int> src_info;               // [le, rows]
  std::vector<std::uint16_t> rows;         // [le, rows, hidden]
  std::int64_t rows_per_expert = 0;
};

Result<Received> read_received(const ep::LowLatencyDispatchResult& d, const Routing& rt, bool fp8) {
  const auto& s = *rt.shape;
  Received got;
  auto count = read<int>(d.recv_count);
  if (!count) return count.error();
  got.recv_count = std::move(*count);
  auto range = read<std::int64_t>(d.handle.layout_range);
  if (!range) return range.error();
  got.layout_range = std::move(*range);
  auto src = read<int>(d.handle.src_info);
  if (!src) return src.error();
  got.src_info = std::move(*src);
  const TensorView& x = d.recv_x;
  const std::int64_t rows = x.shape[1];
  const std::int64_t hidden = s.hidden;
  got.rows_per_expert = rows;
  if (x.ndim != 3 || x.strides[2] != 1 || x.strides[1] != hidden) {
    return make_error(
        ErrorCode::internal,
        "bench ep --mode low-latency: recv_x is not expert-major row-major: " + x.describe());
  }
  got.rows.assign(static_cast<std::size_t>(rt.local_experts * rows * hidden), 0);
  const std::size_t elem = ep::dtype_size(x.dtype);
  std::vector<float> scales;
  const TensorView& sv = d.recv_x_scales;
  if (fp8) {
    // Every element of the strided scales: the largest offset bounds it.
    std::int64_t span = 1;
    for (int i = 0; i < sv.ndim; ++i)
      span += (sv.shape[static_cast<std::size_t>(i)] - 1) * sv.strides[static_cast<std::size_t>(i)];
    scales.resize(static_cast<std::size_t>(span));
    EPKIT_TRY(memcpy_d2h(scales.data(), sv.data, scales.size() * sizeof(float)));
  }
  std::vector<std::uint8_t> raw;
  for (int le = 0; le < rt.local_experts; ++le) {
    const std::int64_t n =
        std::clamp<std::int64_t>(got.recv_count[static_cast<std::size_t>(le)], 0, rows);
    if (n == 0) continue;
    raw.resize(static_cast<std::size_t>(n * hidden) * elem);
    const auto* from = static_cast<const std::uint8_t*>(x.data) +
                       static_cast<std::size_t>(le * x.strides[0]) * elem;
    EPKIT_TRY(memcpy_d2h(raw.data(), from, raw.size()));
    std::uint16_t* to = got.rows.data() + le * rows * hidden;
    if (!fp8) {
      std::memcpy(to, raw.data(), raw.size());
      continue;
    }
    for (std::int64_t row = 0; row < n; ++row) {
      for (std::int64_t c = 0; c < hidden; ++c) {
        const std::int64_t sc = c / 128;
        const float scale = scales[static_cast<std::size_t>(
            le * sv.strides[0] + row * sv.strides[1] + sc * sv.strides[2])];
        const float v = cf::fp8_e4m3_to_float(raw[static_cast<std::size_t>(row * hidden + c)]);
        to[row * hidden + c] = cf::float_to_bf16(v * scale);
      }
    }
  }
  return got;
}

// recv_count, then where every row came from; BF16 rows bitwise, FP8 rows
// by calc_diff. Verdicts go to `count` and `rows`.
void check_dispatch(const Received& got, const Routing& rt, bool fp8, std::string& count,
                    std::string& rows) {
  const auto& s = *rt.shape;
  const std::int64_t hidden = s.hidden;
  std::vector<double> deq;
  std::vector<double> src;
  for (int le = 0; le < rt.local_experts; ++le) {
    const auto& per_rank = rt.tokens[static_cast<std::size_t>(le)];
    std::size_t want = 0;
    for (const auto& v : per_rank) want += v.size();
    const int have = got.recv_count[static_cast<std::size_t>(le)];
    if (static_cast<std::size_t>(have) != want) {
      note(count, fmt::format("{}: local expert {}: recv_count {}, expected {}",
                              fp8 ? "FP8" : "BF16", le, have, want));
      continue;
    }
    for (int q = 0; q < rt.world; ++q) {
      const std::int64_t packed = got.layout_range[static_cast<std::size_t>(le * rt.world + q)];
      const std::int64_t begin = packed >> 32;
      const std::int64_t n = packed & 0xffffffff;
      const auto& expect = per_rank[static_cast<std::size_t>(q)];
      if (static_cast<std::size_t>(n) != expect.size() || begin < 0 ||
          begin + n > got.rows_per_expert) {
        note(rows, fmt::format("local expert {}, rank {}: layout_range ({}, {}), expected {} rows",
                               le, q, begin, n, expect.size()));
        continue;
      }
      std::vector<int> seen;
      for (std::int64_t i = begin; i < begin + n; ++i) {
        const int t = got.src_info[static_cast<std::size_t>(le * got.rows_per_expert + i)];
        seen.push_back(t);
        if (!std::binary_search(expect.begin(), expect.end(), t)) {
          note(rows, fmt::format("local expert {}, row {}: src_info {} is not a token rank {} "
                                 "routed there",
                                 le, i, t, q));
          continue;
        }
        const std::uint16_t* have_row = got.rows.data() + (le * got.rows_per_expert + i) * hidden;
        const std::uint16_t* want_row =
            rt.all[static_cast<std::size_t>(q)].x.data() + static_cast<std::int64_t>(t) * hidden;
        if (!fp8) {
          if (std::memcmp(have_row, want_row, static_cast<std::size_t>(hidden) * 2) != 0) {
            note(rows, fmt::format("local expert {}, row {} (rank {} token {}) differs from the "
                                   "source row",
                                   le, i, q, t));
          }
          continue;
        }
        for (std::int64_t c = 0; c < hidden; ++c) {
          deq.push_back(cf::bf16_to_float(have_row[c]));
          src.push_back(cf::bf16_to_float(want_row[c]));
        }
      }
      std::sort(seen.begin(), seen.end());
      if (seen != expect && rows.empty()) {
        note(rows, fmt::format("local expert {}: rank {}'s tokens arrived {} times in all, or "
                               "some twice",
                               le, q, seen.size()));
      }
    }
  }
  if (fp8 && !deq.empty()) {
    const double diff = cf::calc_diff(deq, src);
    if (diff >= 9e-4) note(rows, fmt::format("dequantized rows: calc_diff {:.3g} >= 9e-4", diff));
  }
}

std::string check_combine(const std::vector<std::uint8_t>& combined, const EpLowLatencyInputs& mine,
                          const bench::EpLowLatencyShape& s, double tolerance) {
  std::vector<double> have(static_cast<std::size_t>(s.tokens) * s.hidden);
  std::vector<double> want(have.size());
  for (int t = 0; t < s.tokens; ++t) {
    double w = 0;
    for (int k = 0; k < s.topk; ++k) {
      const auto i = static_cast<std::size_t>(t * s.topk + k);
      if (mine.topk_idx[i] != -1) w += mine.topk_weights[i];
    }
    for (int c = 0; c < s.hidden; ++c) {
      const auto i = static_cast<std::size_t>(t) * s.hidden + c;
      std::uint16_t bits = 0;
      std::memcpy(&bits, combined.data() + i * 2, 2);
      have[i] = cf::bf16_to_float(bits);
      want[i] = w * cf::bf16_to_float(mine.x[i]);
    }
  }
  const double diff = cf::calc_diff(have, want);
  if (diff < tolerance) return "";
  return fmt::format("calc_diff {:.3g} >= {:.0e}", diff, tolerance);
}

Result<ep::DeviceMemory> upload(const void* host, std::size_t bytes) {
  auto mem = ep::DeviceMemory::allocate(bytes);
  if (!mem) return mem.error();
  EPKIT_TRY(cuda_ok(cudaMemcpy(mem->get(), host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy"));
  // From pageable memory the copy may return before its DMA lands, and the
  // bench's stream does not wait for the legacy one.
  EPKIT_TRY(cuda_ok(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize"));
  return std::move(*mem);
}

}  // namespace

Result<bench::EpLowLatencyReport> run_ep_low_latency_bench(runtime::GpuRank& rank,
                                                           ep::Buffer& buffer,
                                                           const EpLowLatencyBenchOptions& o) {
  const int me = buffer.rank();
  const int world = buffer.num_ranks();
  auto step = [&] { return Deadline::after_seconds(o.timeout_s); };
  bench::EpLowLatencyReport rep;
  rep.shape = o.shape;
  rep.shape.ranks = world;
  rep.sms = o.sms;
  rep.warmup = o.warmup;
  rep.iters = o.iters;
  rep.seed = o.seed;
  rep.gpu = rank.gpu.name;
  const bench::EpLowLatencyShape& s = rep.shape;
  if (s.experts % world != 0) {
    return make_error(ErrorCode::invalid,
                      fmt::format("--experts {} does not split over {} ranks", s.experts, world));
  }

  auto stream_or = detail::OwnedStream::create();
  if (!stream_or) return stream_or.error();
  const cudaStream_t stream = stream_or->get();
  auto sync = [&](const std::string& what) { return detail::wait_stream(stream, step(), what); };

  const Routing rt = make_routing(s, o.seed, me, world);
  const EpLowLatencyInputs& mine = rt.all[static_cast<std::size_t>(me)];
  const auto tokens = static_cast<std::int64_t>(s.tokens);
  auto x_mem = upload(mine.x.data(), mine.x.size() * 2);
  if (!x_mem) return x_mem.error();
  auto idx_mem = upload(mine.topk_idx.data(), mine.topk_idx.size() * 8);
  if (!idx_mem) return idx_mem.error();
  auto w_mem = upload(mine.topk_weights.data(), mine.topk_weights.size() * 4);
  if (!w_mem) return w_mem.error();
  const TensorView x = TensorView::matrix(x_mem->get(), DType::bf16, tokens, s.hidden);
  const TensorView topk_idx = TensorView::matrix(idx_mem->get(), DType::int64, tokens, s.topk);
  const TensorView topk_w = TensorView::matrix(w_mem->get(), DType::fp32, tokens, s.topk);

  EPKIT_TRY(buffer.clean_low_latency_buffer(s.tokens, s.hidden, s.experts));

  ep::StreamOrder order;
  order.stream = stream;
  auto dispatch = [&](bool fp8, bool hook) {
    ep::LowLatencyDispatchArgs a;
    a.x = x;
    a.topk_idx = topk_idx;
    a.num_max_dispatch_tokens_per_rank = s.tokens;
    a.num_experts = s.experts;
    a.use_fp8 = fp8;
    a.return_recv_hook = hook;
    a.num_sms = o.sms;
    a.order = order;
    return buffer.low_latency_dispatch(a);
  };
  auto combine = [&](const TensorView& in, const ep::LowLatencyHandle& h, bool hook) {
    ep::LowLatencyCombineArgs a;
    a.x = in;
    a.topk_idx = topk_idx;
    a.topk_weights = topk_w;
    a.handle = h;
    a.return_recv_hook = hook;
    a.num_sms = o.sms;
    a.order = order;
    return buffer.low_latency_combine(a);
  };

  // Checks, and per dtype the combine input the timing uses: the received
  // rows (FP8 ones cast back to BF16) in memory the Buffer does not own, as
  // expert outputs would be.
  std::vector<std::string> verdict(k_num_checks);
  std::array<ep::DeviceMemory, 2> combine_in;  // BF16, FP8
  std::array<TensorView, 2> combine_view;
  std::array<std::int64_t, 2> selections{};
  for (int fp8 = 1; fp8 >= 0; --fp8) {
    const char* dtype = fp8 ? "FP8" : "BF16";
    auto d = dispatch(fp8 != 0, false);
    if (!d) return d.error();
    EPKIT_TRY(sync(fmt::format("low-latency dispatch ({})", dtype)));
    auto got = read_received(*d, rt, fp8 != 0);
    if (!got) return got.error();
    check_dispatch(*got, rt, fp8 != 0, verdict[c_count], verdict[fp8 ? c_fp8 : c_bf16]);
    auto in = upload(got->rows.data(), got->rows.size() * 2);
    if (!in) return in.error();
    combine_in[static_cast<std::size_t>(fp8)] = std::move(*in);
    const TensorView view =
        TensorView::tensor3(combine_in[static_cast<std::size_t>(fp8)].get(), DType::bf16,
                            rt.local_experts, got->rows_per_expert, s.hidden);
    combine_view[static_cast<std::size_t>(fp8)] = view;
    auto c = combine(view, d->handle, false);
    if (!c) return c.error();
    EPKIT_TRY(sync(fmt::format("low-latency combine ({} dispatch)", dtype)));
    auto out = ep::to_host(c->combined_x);
    if (!out) return out.error();
    note(verdict[fp8 ? c_comb_fp8 : c_comb_bf16], check_combine(*out, mine, s, fp8 ? 9e-4 : 1e-5));
    selections[static_cast<std::size_t>(fp8)] = bench::ep_low_latency_selections(mine.topk_idx);
  }
  for (std::size_t i = 0; i < k_num_checks; ++i) {
    if (!verdict[i].empty()) {
      rep.local_failures.push_back(std::string(k_checks[i].name) + ": " + verdict[i]);
    }
  }
  auto checks =
      detail::exchange_verdicts(rank.store(), "epbench-low-latency/checks", me, world, step(),
                                verdict, {std::begin(k_checks), std::end(k_checks)});
  if (!checks) return checks.error();
  rep.checks = std::move(*checks);
  if (!rep.checks_passed()) return rep;

  // Timing: events on the caller's stream around each call; the hook's
  // receive is timed alone (nothing else between its events).
  auto flush = ep::DeviceMemory::allocate(o.flush_bytes);
  if (!flush) return flush.error();
  constexpr int k_marks = 5;
  std::vector<ep::Event> events;
  for (int i = 0; i < o.iters * k_marks; ++i) {
    cudaEvent_t e = nullptr;
    EPKIT_TRY(cuda_ok(cudaEventCreate(&e), "cudaEventCreate"));
    events.emplace_back(e);
  }
  auto mark = [&](int iter, int m) -> Result<void> {
    if (iter < 0) return {};  // warm-up
    return cuda_ok(
        cudaEventRecord(events[static_cast<std::size_t>(iter * k_marks + m)].get(), stream),
        "cudaEventRecord");
  };
  auto elapsed = [&](int iter, int from, int to) -> Result<double> {
    float ms = 0;
    EPKIT_TRY(cuda_ok(
        cudaEventElapsedTime(&ms, events[static_cast<std::size_t>(iter * k_marks + from)].get(),
                             events[static_cast<std::size_t>(iter * k_marks + to)].get()),
        "cudaEventElapsedTime"));
    return static_cast<double>(ms) * 1000.0;
  };
  auto run_hook = [](ep::LowLatencyHook& hook) -> Result<void> {
    if (!hook) return make_error(ErrorCode::internal, "low-latency call returned no hook");
    return hook();
  };
  std::vector<bench::EpLowLatencyRun> runs;
  for (int fp8 = 1; fp8 >= 0; --fp8) {
    const TensorView& in = combine_view[static_cast<std::size_t>(fp8)];
    bench::EpLowLatencyRun run;
    run.fp8 = fp8 != 0;
    run.selections = selections[static_cast<std::size_t>(fp8)];
    ep_low_latency_fill_bytes(run, s.hidden);
    for (bool hook : {false, true}) {
      for (int iter = -o.warmup; iter < o.iters; ++iter) {
        const int i = iter < 0 ? -1 : iter;
        EPKIT_TRY(cuda_ok(cudaMemsetAsync(flush->get(), 0, flush->size(), stream),
                          "cudaMemsetAsync (L2 flush)"));
        EPKIT_TRY(mark(i, 0));
        auto d = dispatch(fp8 != 0, hook);
        if (!d) return d.error();
        EPKIT_TRY(mark(i, 1));
        if (hook) {
          EPKIT_TRY(run_hook(d->hook));
          EPKIT_TRY(mark(i, 2));
        }
        auto c = combine(in, d->handle, hook);
        if (!c) return c.error();
        EPKIT_TRY(mark(i, hook ? 3 : 2));
        if (hook) {
          EPKIT_TRY(run_hook(c->hook));
          EPKIT_TRY(mark(i, 4));
        }
      }
      EPKIT_TRY(sync(fmt::format("timing low-latency {} dispatch and combine{}",
                                 fp8 ? "FP8" : "BF16", hook ? " with the hook" : "")));
      std::array<std::vector<double>, 4> samples;
      for (int i = 0; i < o.iters; ++i) {
        for (int m = 0; m < (hook ? 4 : 2); ++m) {
          auto t = elapsed(i, m, m + 1);
          if (!t) return t.error();
          samples[static_cast<std::size_t>(m)].push_back(*t);
        }
        if (!hook) {
          auto t = elapsed(i, 0, 2);
          if (!t) return t.error();
          samples[2].push_back(*t);
        }
      }
      if (hook) {
        run.dispatch_send = bench::ep_low_latency_summarize(samples[0]);
        run.dispatch_recv = bench::ep_low_latency_summarize(samples[1]);
        run.combine_send = bench::ep_low_latency_summarize(samples[2]);
        run.combine_recv = bench::ep_low_latency_summarize(samples[3]);
      } else {
        run.dispatch = bench::ep_low_latency_summarize(samples[0]);
        run.combine = bench::ep_low_latency_summarize(samples[1]);
        run.pair = bench::ep_low_latency_summarize(samples[2]);
      }
    }
    runs.push_back(run);
  }

  // Every rank's runs to rank 0, which prints them all, as DeepEP's ranks do.
  nlohmann::json mine_json = nlohmann::json::array();
  for (const auto& r : runs) mine_json.push_back(to_json(r));
  EPKIT_TRY(
      rank.store().set(fmt::format("epbench-low-latency/runs/{}", me), mine_json.dump(), step()));
  rep.by_rank.assign(static_cast<std::size_t>(me == 0 ? world : 1), {});
  rep.by_rank[0] = runs;
  if (me == 0) {
    for (int r = 1; r < world; ++r) {
      auto value = rank.store().get(fmt::format("epbench-low-latency/runs/{}", r), step());
      if (!value) return value.error();
      auto j = runtime::peer::parse(*value);
      std::vector<bench::EpLowLatencyRun> theirs(j.is_array() ? j.size() : 0);
      bool ok = j.is_array() && j.size() == runs.size();
      for (std::size_t i = 0; ok && i < theirs.size(); ++i) ok = from_json(j[i], theirs[i]);
      if (!ok) {
        return make_error(ErrorCode::internal,
                          fmt::format("bench ep: rank {} sent malformed times", r));
      }
      rep.by_rank[static_cast<std::size_t>(r)] = std::move(theirs);
    }
  }
  return rep;
}

}  // namespace epkit::harness
