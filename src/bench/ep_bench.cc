// The GPU half of `epkit bench ep` (ep_bench.h): checks against the
// reference path, the dump, and DeepEP-style timing of the engine.
#include "bench/ep_bench.h"

#ifdef EPKIT_WITH_CUDA

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

#include "ep/device_memory.h"
#include "ep/reference.h"
#include "ep/store_bootstrap.h"
#include "ep/testdata.h"
#include "runtime/cuda_error.h"
#include "util/npy.h"

namespace epkit::bench {
namespace {

using runtime::cuda_ok;

using ep::DType;
using ep::TensorView;
using runtime::Deadline;

// The caller's stream of DeepEP's tests (its compute stream): every engine
// call waits for it and makes it wait, so events recorded on it around a
// call bracket the whole operation.
class OwnedStream {
 public:
  static Result<OwnedStream> create() {
    OwnedStream s;
    EPKIT_TRY(cuda_ok(cudaStreamCreateWithFlags(&s.m_stream, cudaStreamNonBlocking),
                      "cudaStreamCreateWithFlags"));
    return s;
  }
  OwnedStream(OwnedStream&& other) noexcept : m_stream(std::exchange(other.m_stream, nullptr)) {}
  OwnedStream& operator=(OwnedStream&&) = delete;
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  ~OwnedStream() {
    if (m_stream != nullptr) cudaStreamDestroy(m_stream);
  }
  cudaStream_t get() const { return m_stream; }

 private:
  OwnedStream() = default;
  cudaStream_t m_stream = nullptr;
};

// A bounded wait: the engine's own waits for peers end in its timeout, this
// catches anything else that never completes.
Result<void> wait_stream(cudaStream_t stream, Deadline deadline, const std::string& what) {
  for (;;) {
    cudaError_t rc = cudaStreamQuery(stream);
    if (rc == cudaSuccess) return {};
    if (rc != cudaErrorNotReady) return ep::cuda_error(rc, what);
    if (deadline.expired()) {
      return make_error(ErrorCode::timeout,
                        fmt::format("bench ep: {} did not finish within the timeout", what));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

const char* npy_descr(DType t) {
  // BF16 and FP8 have no numpy dtype: their raw bits go out as unsigned
  // integers of the same width (README.txt says so).
  switch (t) {
    case DType::bf16:
      return "<u2";
    case DType::fp8_e4m3:
      return "|u1";
    case DType::fp32:
      return "<f4";
    case DType::int32:
      return "<i4";
    case DType::int64:
      return "<i8";
    case DType::boolean:
      return "|b1";
  }
  return "|u1";
}

std::vector<int> as_ints(const std::vector<std::uint8_t>& bytes) {
  std::vector<int> out(bytes.size() / sizeof(int));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(int));
  return out;
}

// A host copy of one tensor with what the dump needs to write it.
struct HostTensor {
  DType dtype = DType::bf16;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
  std::size_t row_bytes() const {
    return shape.size() == 2 ? static_cast<std::size_t>(shape[1]) * ep::dtype_size(dtype)
                             : ep::dtype_size(dtype);
  }
};

Result<HostTensor> copy(const TensorView& v) {
  HostTensor h;
  h.dtype = v.dtype;
  if (v.ndim == 1) {
    h.shape = {v.shape[0]};
  } else {
    h.shape = {v.shape[0], v.shape[1]};
  }
  if (v.empty()) {
    // An absent output (no scales for BF16): an empty array of the right
    // rank keeps the comparisons uniform.
    h.shape.assign(h.shape.size(), 0);
    return h;
  }
  auto bytes = ep::to_host(v);
  if (!bytes) return bytes.error();
  h.bytes = std::move(*bytes);
  return h;
}

// One dispatch's outputs on the host, the engine's or the reference's.
struct HostDispatch {
  std::int64_t rows = 0;
  HostTensor recv_x;
  HostTensor recv_x_scales;
  HostTensor recv_topk_idx;
  HostTensor recv_topk_weights;
  HostTensor recv_src_idx;
  std::vector<int> rank_prefix_matrix;
  std::vector<int> per_expert;
};

Result<HostDispatch> copy_dispatch(const ep::DispatchResult& r, bool routing) {
  HostDispatch h;
  h.rows = r.recv_x.rows();
  auto x = copy(r.recv_x);
  if (!x) return x.error();
  h.recv_x = std::move(*x);
  auto s = copy(r.recv_x_scales);
  if (!s) return s.error();
  h.recv_x_scales = std::move(*s);
  if (routing) {
    auto idx = copy(r.recv_topk_idx);
    if (!idx) return idx.error();
    h.recv_topk_idx = std::move(*idx);
    auto w = copy(r.recv_topk_weights);
    if (!w) return w.error();
    h.recv_topk_weights = std::move(*w);
    auto src = copy(r.recv_src_idx);
    if (!src) return src.error();
    h.recv_src_idx = std::move(*src);
  }
  if (r.handle) {
    auto m = ep::to_host(r.handle->rank_prefix_matrix);
    if (!m) return m.error();
    h.rank_prefix_matrix = as_ints(*m);
  }
  h.per_expert = r.num_recv_tokens_per_expert;
  return h;
}

Result<HostDispatch> copy_reference(const ep::ReferenceDispatch& r) {
  HostDispatch h;
  h.rows = r.num_recv_tokens;
  using Pair = std::pair<const ep::DeviceTensor*, HostTensor*>;
  const Pair outputs[] = {{&r.recv_x, &h.recv_x},
                          {&r.recv_x_scales, &h.recv_x_scales},
                          {&r.recv_topk_idx, &h.recv_topk_idx},
                          {&r.recv_topk_weights, &h.recv_topk_weights},
                          {&r.recv_src_idx, &h.recv_src_idx}};
  for (auto [from, to] : outputs) {
    auto t = copy(from->view);
    if (!t) return t.error();
    *to = std::move(*t);
  }
  h.rank_prefix_matrix = r.rank_prefix_matrix;
  h.per_expert = r.num_recv_tokens_per_expert;
  return h;
}

std::string hex(const std::uint8_t* p, std::size_t n) {
  // Little-endian element bytes, printed most significant first.
  std::string out;
  for (std::size_t i = n; i-- > 0;) out += fmt::format("{:02x}", p[i]);
  return out;
}

// "" when equal; otherwise how many rows differ and the first element that
// does, so a report says where to look.
std::string compare(const char* name, const HostTensor& engine, const HostTensor& ref) {
  if (engine.shape != ref.shape) {
    return fmt::format("{}: engine shape [{}], reference [{}]", name, fmt::join(engine.shape, ", "),
                       fmt::join(ref.shape, ", "));
  }
  if (engine.dtype != ref.dtype) {
    return fmt::format("{}: engine {}, reference {}", name, ep::to_string(engine.dtype),
                       ep::to_string(ref.dtype));
  }
  auto [a, b] =
      std::mismatch(engine.bytes.begin(), engine.bytes.end(), ref.bytes.begin(), ref.bytes.end());
  if (a == engine.bytes.end() && b == ref.bytes.end()) return "";
  const std::size_t row = engine.row_bytes();
  const std::size_t elem = ep::dtype_size(engine.dtype);
  const std::size_t at = static_cast<std::size_t>(a - engine.bytes.begin());
  std::size_t rows_differ = 0;
  for (std::size_t off = at / row * row; off < engine.bytes.size(); off += row) {
    if (std::memcmp(engine.bytes.data() + off, ref.bytes.data() + off, row) != 0) ++rows_differ;
  }
  const std::size_t first = at / elem * elem;
  return fmt::format(
      "{} ({}): {} of {} rows differ; first at row {}, column {} (engine 0x{}, "
      "reference 0x{})",
      name, ep::to_string(engine.dtype), rows_differ, engine.bytes.size() / row, at / row,
      (at % row) / elem, hex(engine.bytes.data() + first, elem),
      hex(ref.bytes.data() + first, elem));
}

std::string compare_ints(const char* name, const std::vector<int>& engine,
                         const std::vector<int>& ref) {
  if (engine == ref) return "";
  auto [a, b] = std::mismatch(engine.begin(), engine.end(), ref.begin(), ref.end());
  std::size_t at = static_cast<std::size_t>(a - engine.begin());
  return fmt::format(
      "{}: engine has {} entries, reference {}; first difference at {} (engine "
      "{}, reference {})",
      name, engine.size(), ref.size(), at,
      a == engine.end() ? std::string("-") : std::to_string(*a),
      b == ref.end() ? std::string("-") : std::to_string(*b));
}

// Joins the non-empty messages of a check.
void note(std::string& verdict, const std::string& message) {
  if (message.empty()) return;
  if (!verdict.empty()) verdict += "; ";
  verdict += message;
}

std::string compare_dispatch(const HostDispatch& e, const HostDispatch& r, bool routing) {
  std::string v;
  if (e.rows != r.rows) {
    note(v, fmt::format("received rows: engine {}, reference {}", e.rows, r.rows));
  }
  note(v, compare("recv_x", e.recv_x, r.recv_x));
  note(v, compare("recv_x_scales", e.recv_x_scales, r.recv_x_scales));
  if (routing) {
    note(v, compare("recv_topk_idx", e.recv_topk_idx, r.recv_topk_idx));
    note(v, compare("recv_topk_weights", e.recv_topk_weights, r.recv_topk_weights));
    note(v, compare("recv_src_idx", e.recv_src_idx, r.recv_src_idx));
    note(v, compare_ints("num_recv_tokens_per_expert", e.per_expert, r.per_expert));
  }
  note(v, compare_ints("rank_prefix_matrix", e.rank_prefix_matrix, r.rank_prefix_matrix));
  return v;
}

struct HostCombine {
  HostTensor combined_x;
  HostTensor combined_topk_weights;
};

std::string compare_combine(const HostCombine& e, const HostCombine& r) {
  std::string v;
  note(v, compare("combined_x", e.combined_x, r.combined_x));
  note(v, compare("combined_topk_weights", e.combined_topk_weights, r.combined_topk_weights));
  return v;
}

// Start and stop events per timed run and the L2 flush buffer, made once.
class Timer {
 public:
  static Result<Timer> create(int iters, std::size_t flush_bytes) {
    Timer t;
    for (int i = 0; i < iters; ++i) {
      for (auto* list : {&t.m_start, &t.m_stop}) {
        cudaEvent_t e = nullptr;
        EPKIT_TRY(cuda_ok(cudaEventCreate(&e), "cudaEventCreate"));
        list->emplace_back(e);
      }
    }
    auto flush = ep::DeviceMemory::allocate(flush_bytes);
    if (!flush) return flush.error();
    t.m_flush = std::move(*flush);
    return t;
  }

  // DeepEP's bench(): warm-up calls, then each timed call alone between two
  // events, preceded by a write of the flush buffer so that no run finds the
  // previous one's data in L2.
  template <typename Op>
  Result<EpTiming> run(cudaStream_t stream, int warmup, Op&& op, Deadline deadline,
                       const std::string& what) {
    for (int i = 0; i < warmup; ++i) EPKIT_TRY(op());
    for (std::size_t i = 0; i < m_start.size(); ++i) {
      EPKIT_TRY(cuda_ok(cudaMemsetAsync(m_flush.get(), 0, m_flush.size(), stream),
                        "cudaMemsetAsync (L2 flush)"));
      EPKIT_TRY(cuda_ok(cudaEventRecord(m_start[i].get(), stream), "cudaEventRecord"));
      EPKIT_TRY(op());
      EPKIT_TRY(cuda_ok(cudaEventRecord(m_stop[i].get(), stream), "cudaEventRecord"));
    }
    EPKIT_TRY(wait_stream(stream, deadline, what));
    std::vector<double> samples;
    samples.reserve(m_start.size());
    for (std::size_t i = 0; i < m_start.size(); ++i) {
      float ms = 0;
      EPKIT_TRY(cuda_ok(cudaEventElapsedTime(&ms, m_start[i].get(), m_stop[i].get()),
                        "cudaEventElapsedTime"));
      samples.push_back(static_cast<double>(ms) * 1000.0);
    }
    return ep_summarize(std::move(samples));
  }

 private:
  Timer() = default;
  std::vector<ep::Event> m_start;
  std::vector<ep::Event> m_stop;
  ep::DeviceMemory m_flush;
};

using Handles = std::array<std::shared_ptr<const ep::DispatchHandle>, 2>;  // BF16, FP8

struct CheckSpec {
  const char* name;
  const char* what;
};

// The checks in the order they are printed; each rank fills one verdict per
// entry ("" = passed).
constexpr CheckSpec k_checks[] = {
    {"layout", "num_tokens_per_rank, num_tokens_per_expert, is_token_in_rank"},
    {"dispatch (BF16)",
     "recv_x, recv_topk_idx, recv_topk_weights, recv_src_idx bitwise; row, per-expert and "
     "rank-prefix counts"},
    {"combine (BF16)", "combined_x, combined_topk_weights bitwise"},
    {"dispatch (FP8)",
     "recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights, recv_src_idx bitwise; counts"},
    {"combine (FP8 handle)", "combined_x, combined_topk_weights bitwise"},
    {"sweep",
     "cached dispatch FP8 and BF16 recv_x (+ scales) and combine bitwise at every SMs x "
     "NVL chunk"},
};
constexpr std::size_t k_num_checks = sizeof(k_checks) / sizeof(k_checks[0]);

struct DumpData {
  HostTensor x, x_fp8, x_scales, topk_idx, topk_weights;
  HostTensor num_tokens_per_rank, num_tokens_per_expert, is_token_in_rank;
  HostDispatch bf16, fp8;
  HostCombine combined;
};

std::string dump_readme(const EpReport& rep) {
  return fmt::format(
      R"(epkit bench ep --dump: inputs and outputs of every rank, as NumPy .npy files
(format 1.0, C order, little-endian).

Run: num_tokens={tokens}, hidden={hidden}, num_topk={topk}, num_experts={experts},
ranks={ranks}, seed={seed}; outputs from the engine at SMs {sms}, NVL chunk {chunk}.

Types without a NumPy dtype are stored as raw bits:
  BF16 -> '<u2' (view: (a.astype(np.uint32) << 16).view(np.float32))
  FP8 E4M3 -> '|u1' (raw e4m3fn bytes; sign 1, exponent 4 (bias 7), mantissa 3)

rank<r>/ holds rank r's files:
  x.npy                 BF16 [tokens, hidden]            the dispatched tokens
  x_fp8.npy             FP8  [tokens, hidden]            x cast per 128 channels
  x_scales.npy          f32  [tokens, hidden/128]        x_fp8's scales (row-major here;
                                                         the engine got them column-major)
  topk_idx.npy          i64  [tokens, topk]              experts per token, -1 = none
  topk_weights.npy      f32  [tokens, topk]
  num_tokens_per_rank.npy, num_tokens_per_expert.npy, is_token_in_rank.npy   layout()
  recv_x.npy            BF16 [received, hidden]          dispatch of x (segments by source
                                                         rank, each in token order)
  recv_topk_idx.npy     i64  [received, topk]            local expert, -1 = not this rank's
  recv_topk_weights.npy f32  [received, topk]            0 where the index is -1
  recv_src_idx.npy      i32  [received]                  token index on the source rank
  rank_prefix_matrix.npy i32 [ranks, ranks]              (i, j): rows rank j got from ranks 0..i
  num_recv_tokens_per_expert.npy i32 [local experts]
  recv_x_fp8.npy        FP8  [received, hidden]          dispatch of x_fp8
  recv_x_scales.npy     f32  [received, hidden/128]      its scales, row-major
  combined_x.npy        BF16 [tokens, hidden]            combine of recv_x (the reference's BF16
                                                         rows, equal to recv_x.npy when the
                                                         dispatch check passed) with weights
                                                         recv_topk_weights: FP32 sum in rank
                                                         order, rounded once to BF16
  combined_topk_weights.npy f32 [tokens, topk]

scripts/device/check_ep_dump.py DIR re-derives the outputs from every rank's inputs.
)",
      fmt::arg("tokens", rep.shape.tokens), fmt::arg("hidden", rep.shape.hidden),
      fmt::arg("topk", rep.shape.topk), fmt::arg("experts", rep.shape.experts),
      fmt::arg("ranks", rep.shape.ranks), fmt::arg("seed", rep.seed),
      fmt::arg("sms", rep.check_sms), fmt::arg("chunk", rep.check_chunk));
}

Result<void> write_dump(const std::string& dir, int rank, const EpReport& rep, const DumpData& d) {
  namespace fs = std::filesystem;
  fs::path base = fs::path(dir) / fmt::format("rank{}", rank);
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec) {
    return make_error(ErrorCode::permission,
                      fmt::format("--dump: cannot create {}: {}", base.string(), ec.message()));
  }
  if (rank == 0) {
    std::ofstream readme(fs::path(dir) / "README.txt");
    readme << dump_readme(rep);
    if (!readme) {
      return make_error(ErrorCode::permission,
                        fmt::format("--dump: cannot write {}/README.txt", dir));
    }
  }
  const std::pair<const char*, const HostTensor*> files[] = {
      {"x", &d.x},
      {"x_fp8", &d.x_fp8},
      {"x_scales", &d.x_scales},
      {"topk_idx", &d.topk_idx},
      {"topk_weights", &d.topk_weights},
      {"num_tokens_per_rank", &d.num_tokens_per_rank},
      {"num_tokens_per_expert", &d.num_tokens_per_expert},
      {"is_token_in_rank", &d.is_token_in_rank},
      {"recv_x", &d.bf16.recv_x},
      {"recv_topk_idx", &d.bf16.recv_topk_idx},
      {"recv_topk_weights", &d.bf16.recv_topk_weights},
      {"recv_src_idx", &d.bf16.recv_src_idx},
      {"recv_x_fp8", &d.fp8.recv_x},
      {"recv_x_scales", &d.fp8.recv_x_scales},
      {"combined_x", &d.combined.combined_x},
      {"combined_topk_weights", &d.combined.combined_topk_weights},
  };
  for (const auto& [name, t] : files) {
    EPKIT_TRY(util::write_npy((base / (std::string(name) + ".npy")).string(), npy_descr(t->dtype),
                              t->shape, t->bytes.data(), t->bytes.size()));
  }
  const auto& m = d.bf16.rank_prefix_matrix;
  const auto n = static_cast<std::int64_t>(rep.shape.ranks);
  // A matrix of the wrong size (a failed check says so) is still written,
  // flat, for whoever investigates.
  const std::vector<std::int64_t> m_shape =
      m.size() == static_cast<std::size_t>(n * n)
          ? std::vector<std::int64_t>{n, n}
          : std::vector<std::int64_t>{static_cast<std::int64_t>(m.size())};
  EPKIT_TRY(util::write_npy((base / "rank_prefix_matrix.npy").string(), "<i4", m_shape, m.data(),
                            m.size() * sizeof(int)));
  const auto& e = d.bf16.per_expert;
  EPKIT_TRY(util::write_npy((base / "num_recv_tokens_per_expert.npy").string(), "<i4",
                            {static_cast<std::int64_t>(e.size())}, e.data(),
                            e.size() * sizeof(int)));
  return {};
}

// Every rank's check verdicts through the store, so that every rank stops
// (or goes on to the timing) together.
Result<void> exchange_checks(runtime::Store& store, int me, int world, Deadline deadline,
                             const std::vector<std::string>& mine, EpReport& rep) {
  EPKIT_TRY(store.set(fmt::format("epbench/checks/{}", me), nlohmann::json(mine).dump(), deadline));
  rep.checks.clear();
  for (const auto& spec : k_checks) rep.checks.push_back({spec.name, spec.what, {}, {}});
  for (int r = 0; r < world; ++r) {
    auto value = store.get(fmt::format("epbench/checks/{}", r), deadline);
    if (!value) return value.error();
    auto verdicts = nlohmann::json::parse(*value, nullptr, false);
    if (!verdicts.is_array() || verdicts.size() != k_num_checks) {
      return make_error(ErrorCode::internal,
                        fmt::format("bench ep: rank {} sent malformed check results", r));
    }
    for (std::size_t i = 0; i < k_num_checks; ++i) {
      std::string v = verdicts[i].get<std::string>();
      if (v.empty()) continue;
      auto& c = rep.checks[i];
      if (c.failed_ranks.empty()) c.first_failure = fmt::format("rank {}: {}", r, v);
      c.failed_ranks.push_back(r);
    }
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<ep::Buffer>> make_ep_buffer(runtime::GpuRank& rank,
                                                   const EpBenchOptions& o) {
  ep::StoreBootstrap boot(rank.store(), rank.launch.rank, rank.launch.world_size, "epbench/buffer",
                          runtime::Millis(static_cast<std::int64_t>(o.timeout_s * 1000.0)));
  ep::BufferOptions bo;
  bo.max_tokens = o.shape.tokens;
  bo.max_hidden = o.shape.hidden;
  bo.max_topk = o.shape.topk;
  bo.timeout_s = o.timeout_s;
  return ep::Buffer::create(boot, bo);
}

Result<EpReport> run_ep_bench(runtime::GpuRank& rank, ep::Buffer& buffer, const EpBenchOptions& o) {
  const int me = buffer.rank();
  const int world = buffer.num_ranks();
  auto step = [&] { return Deadline::after_seconds(o.timeout_s); };
  runtime::NcclSession& session = *rank.session;

  EpReport rep;
  rep.shape = o.shape;
  rep.shape.ranks = world;
  rep.seed = o.seed;
  rep.warmup = o.warmup;
  rep.iters = o.iters;
  rep.sms = o.sms;
  rep.chunks = o.chunks;
  rep.gpu = rank.gpu.name;
  if (o.sms.empty() || o.chunks.empty()) {
    return make_error(ErrorCode::invalid, "bench ep: --sms and --chunks need a value each");
  }
  // The full checks and the non-cached timing run at the first SM count and
  // the engine's default chunk where the sweep has it.
  rep.check_sms = o.sms.front();
  rep.check_chunk =
      std::find(o.chunks.begin(), o.chunks.end(), ep::Config{}.nvl_chunk) != o.chunks.end()
          ? ep::Config{}.nvl_chunk
          : o.chunks.front();
  auto config = [](int sms, int chunk) {
    ep::Config c;
    c.num_sms = sms;
    c.nvl_chunk = chunk;
    return c;
  };
  const ep::Config check_config = config(rep.check_sms, rep.check_chunk);

  auto stream_or = OwnedStream::create();
  if (!stream_or) return stream_or.error();
  const cudaStream_t stream = stream_or->get();
  auto sync = [&](const std::string& what) { return wait_stream(stream, step(), what); };

  ep::TestInputOptions io;
  io.shape = {o.shape.tokens, o.shape.hidden, o.shape.topk, o.shape.experts};
  io.kind = ep::XKind::random;
  io.seed = o.seed;
  io.rank = me;
  io.num_ranks = world;
  auto inputs = ep::make_test_inputs(io, stream);
  if (!inputs) return inputs.error();
  // The reference runs on the session's stream: the inputs must be there.
  EPKIT_TRY(sync("making the test inputs"));

  auto comm = session.blocking_comm(step());
  if (!comm) return comm.error();
  const ep::NcclContext nccl{&session.api(), *comm, session.stream(), me, world};

  ep::StreamOrder order;
  order.stream = stream;
  const TensorView& topk_idx = inputs->topk_idx.view;
  const TensorView& topk_weights = inputs->topk_weights.view;
  const TensorView& x_bf16 = inputs->x.view;
  const TensorView& x_fp8 = inputs->x_fp8.view;
  const TensorView& x_scales = inputs->x_scales_view;

  std::vector<std::string> verdict(k_num_checks);
  DumpData dump;
  const bool dumping = !o.dump_dir.empty();

  // Layout.
  auto layout = buffer.layout(topk_idx, o.shape.experts, order);
  if (!layout) return layout.error();
  EPKIT_TRY(sync("layout"));

  // The reference path, BF16 and FP8, and its combine of the BF16 rows.
  ep::DispatchArgs ref_args;
  ref_args.x = x_bf16;
  ref_args.topk_idx = topk_idx;
  ref_args.topk_weights = topk_weights;
  auto ref_bf16 = ep::reference_dispatch(nccl, ref_args, o.shape.experts);
  if (!ref_bf16) return ref_bf16.error();
  ref_args.x = x_fp8;
  ref_args.x_scales = x_scales;
  auto ref_fp8 = ep::reference_dispatch(nccl, ref_args, o.shape.experts);
  if (!ref_fp8) return ref_fp8.error();
  // Combine inputs for every check and for the timing: the reference's BF16
  // rows, which the engine's must equal, in memory the Buffer does not own
  // (as DeepEP's recv_x, or expert outputs, would be).
  const TensorView& combine_x = ref_bf16->recv_x.view;
  const TensorView& combine_w = ref_bf16->recv_topk_weights.view;
  auto ref_comb = ep::reference_combine(nccl, *ref_bf16, combine_x, combine_w);
  if (!ref_comb) return ref_comb.error();

  auto host_ref_bf16 = copy_reference(*ref_bf16);
  if (!host_ref_bf16) return host_ref_bf16.error();
  auto host_ref_fp8 = copy_reference(*ref_fp8);
  if (!host_ref_fp8) return host_ref_fp8.error();
  HostCombine host_ref_comb;
  {
    auto cx = copy(ref_comb->combined_x.view);
    if (!cx) return cx.error();
    auto cw = copy(ref_comb->combined_topk_weights.view);
    if (!cw) return cw.error();
    host_ref_comb = {std::move(*cx), std::move(*cw)};
  }

  // Layout against the host's.
  {
    auto per_rank = ep::to_host(layout->num_tokens_per_rank);
    if (!per_rank) return per_rank.error();
    auto per_expert = ep::to_host(layout->num_tokens_per_expert);
    if (!per_expert) return per_expert.error();
    auto in_rank = copy(layout->is_token_in_rank);
    if (!in_rank) return in_rank.error();
    const ep::HostLayout& hl = ref_bf16->layout;
    std::string& v = verdict[0];
    note(v, compare_ints("num_tokens_per_rank", as_ints(*per_rank), hl.num_tokens_per_rank));
    note(v, compare_ints("num_tokens_per_expert", as_ints(*per_expert), hl.num_tokens_per_expert));
    if (in_rank->bytes != hl.is_token_in_rank) {
      note(v, "is_token_in_rank differs from the host's");
    }
    if (dumping) {
      dump.num_tokens_per_rank = {DType::int32, {world}, std::move(*per_rank)};
      dump.num_tokens_per_expert = {DType::int32, {o.shape.experts}, std::move(*per_expert)};
      dump.is_token_in_rank = std::move(*in_rank);
    }
  }

  // Dispatches as the benchmark makes them: a full one with the layout's
  // tensors (what a new batch costs), or a cached one under a handle.
  auto full_dispatch = [&](bool fp8, const ep::Config& cfg) {
    ep::DispatchArgs a;
    a.x = fp8 ? x_fp8 : x_bf16;
    if (fp8) a.x_scales = x_scales;
    a.topk_idx = topk_idx;
    a.topk_weights = topk_weights;
    a.num_tokens_per_rank = layout->num_tokens_per_rank;
    a.is_token_in_rank = layout->is_token_in_rank;
    a.num_tokens_per_expert = layout->num_tokens_per_expert;
    a.config = cfg;
    a.order = order;
    return buffer.dispatch(a);
  };
  auto cached_dispatch = [&](bool fp8, const Handles& h, const ep::Config& cfg) {
    ep::DispatchArgs a;
    a.x = fp8 ? x_fp8 : x_bf16;
    if (fp8) a.x_scales = x_scales;
    a.handle = h[fp8 ? 1 : 0];
    a.config = cfg;
    a.order = order;
    return buffer.dispatch(a);
  };
  auto combine = [&](const std::shared_ptr<const ep::DispatchHandle>& handle, const ep::Config& cfg,
                     bool weights) {
    ep::CombineArgs c;
    c.x = combine_x;
    if (weights) c.topk_weights = combine_w;
    c.handle = handle;
    c.config = cfg;
    c.order = order;
    return buffer.combine(c);
  };
  // DeepEP's tuning combines the dispatch's own recv_x; here that lives in
  // the Buffer, so the combine reads it in place.
  auto combine_of = [&](const TensorView& x,
                        const std::shared_ptr<const ep::DispatchHandle>& handle,
                        const ep::Config& cfg) {
    ep::CombineArgs c;
    c.x = x;
    c.handle = handle;
    c.config = cfg;
    c.order = order;
    return buffer.combine(c);
  };
  auto copy_combine = [&](const ep::CombineResult& r) -> Result<HostCombine> {
    auto cx = copy(r.combined_x);
    if (!cx) return cx.error();
    auto cw = copy(r.combined_topk_weights);
    if (!cw) return cw.error();
    return HostCombine{std::move(*cx), std::move(*cw)};
  };

  // A full dispatch of each dtype at the check configuration, compared
  // output by output, then combine under its handle.
  // handles[i]: the BF16 and FP8 handles made at o.sms[i]. A cached call
  // reuses the handle of a dispatch at its own SM count, in case the
  // engine's handle depends on it (DeepEP's does: one channel per 2 SMs).
  std::vector<Handles> handles(o.sms.size());
  std::int64_t recv_rows = 0;
  std::int64_t remote_rows = 0;
  for (int fp8 = 0; fp8 < 2; ++fp8) {
    auto d = full_dispatch(fp8 != 0, check_config);
    if (!d) return d.error();
    EPKIT_TRY(sync(fp8 ? "dispatch (FP8)" : "dispatch (BF16)"));
    auto host = copy_dispatch(*d, true);
    if (!host) return host.error();
    verdict[fp8 ? 3 : 1] = compare_dispatch(*host, fp8 ? *host_ref_fp8 : *host_ref_bf16, true);
    handles[0][fp8] = d->handle;
    if (!fp8) {
      recv_rows = host->rows;
      remote_rows = ep_remote_rows(host->rank_prefix_matrix, world, me);
    }
    auto combined = combine(d->handle, check_config, true);
    if (!combined) return combined.error();
    EPKIT_TRY(sync(fp8 ? "combine (FP8 handle)" : "combine (BF16)"));
    auto hc = copy_combine(*combined);
    if (!hc) return hc.error();
    verdict[fp8 ? 4 : 2] = compare_combine(*hc, host_ref_comb);
    if (dumping) {
      (fp8 ? dump.fp8 : dump.bf16) = std::move(*host);
      if (!fp8) dump.combined = std::move(*hc);
    }
  }

  // Cached dispatch and combine at every configuration the sweep times: a
  // setting that is fast but wrong must not win.
  std::string& sweep = verdict[5];
  for (std::size_t si = 0; si < o.sms.size(); ++si) {
    const int sms = o.sms[si];
    if (si > 0) {
      for (int fp8 = 0; fp8 < 2; ++fp8) {
        auto d = full_dispatch(fp8 != 0, config(sms, rep.check_chunk));
        if (!d) return d.error();
        handles[si][fp8] = d->handle;
      }
    }
    for (int chunk : o.chunks) {
      const ep::Config cfg = config(sms, chunk);
      const std::string where = fmt::format("SMs {}, NVL chunk {}", sms, chunk);
      for (int fp8 = 0; fp8 < 2; ++fp8) {
        auto d = cached_dispatch(fp8 != 0, handles[si], cfg);
        if (!d) return d.error();
        EPKIT_TRY(sync("cached dispatch at " + where));
        auto host = copy_dispatch(*d, false);
        if (!host) return host.error();
        const HostDispatch& r = fp8 ? *host_ref_fp8 : *host_ref_bf16;
        std::string v = compare("recv_x", host->recv_x, r.recv_x);
        note(v, compare("recv_x_scales", host->recv_x_scales, r.recv_x_scales));
        if (!v.empty() && sweep.empty()) {
          sweep = fmt::format("cached dispatch ({}) at {}: {}", fp8 ? "FP8" : "BF16", where, v);
        }
      }
      auto combined = combine(handles[si][0], cfg, true);
      if (!combined) return combined.error();
      EPKIT_TRY(sync("combine at " + where));
      auto hc = copy_combine(*combined);
      if (!hc) return hc.error();
      std::string v = compare_combine(*hc, host_ref_comb);
      if (!v.empty() && sweep.empty()) sweep = fmt::format("combine at {}: {}", where, v);
    }
  }

  for (std::size_t i = 0; i < k_num_checks; ++i) {
    if (!verdict[i].empty()) {
      rep.local_failures.push_back(std::string(k_checks[i].name) + ": " + verdict[i]);
    }
  }

  if (dumping) {
    using Pair = std::pair<const TensorView*, HostTensor*>;
    const Pair inputs_to_dump[] = {{&x_bf16, &dump.x},
                                   {&x_fp8, &dump.x_fp8},
                                   {&x_scales, &dump.x_scales},
                                   {&topk_idx, &dump.topk_idx},
                                   {&topk_weights, &dump.topk_weights}};
    for (auto [view, to] : inputs_to_dump) {
      auto t = copy(*view);
      if (!t) return t.error();
      *to = std::move(*t);
    }
    EPKIT_TRY(write_dump(o.dump_dir, me, rep, dump));
    dump = DumpData{};
  }

  EPKIT_TRY(exchange_checks(rank.store(), me, world, step(), verdict, rep));
  if (!rep.checks_passed()) return rep;
  // The host copies are done with; the timing needs none of them.
  *host_ref_bf16 = HostDispatch{};
  *host_ref_fp8 = HostDispatch{};
  host_ref_comb = HostCombine{};

  // Timing.
  auto timer = Timer::create(o.iters, o.flush_bytes);
  if (!timer) return timer.error();
  auto make_row = [&](EpOp op, int sms, int chunk, bool cached, const EpTiming& t) {
    EpRow row;
    row.op = op;
    row.sms = sms;
    row.nvl_chunk = chunk;
    row.cached = cached;
    row.rank0 = t;
    row.max_median_us = t.median_us;
    row.logical_bytes = ep_logical_bytes(op, recv_rows, o.shape.hidden);
    row.physical_bytes = ep_physical_bytes(op, remote_rows, o.shape.hidden);
    return row;
  };
  // Results are dropped: only the time counts, and each call's outputs
  // replace the last one's.
  auto discard = [](auto&& r) -> Result<void> {
    if (!r) return r.error();
    return {};
  };
  std::vector<EpRow> rows;
  for (EpOp op : {EpOp::dispatch_fp8, EpOp::dispatch_bf16, EpOp::combine}) {
    for (std::size_t si = 0; si < o.sms.size(); ++si) {
      const int sms = o.sms[si];
      TensorView engine_recv_x;
      if (op == EpOp::combine) {
        auto d = cached_dispatch(false, handles[si], config(sms, o.chunks.front()));
        if (!d) return d.error();
        engine_recv_x = d->recv_x;
      }
      for (int chunk : o.chunks) {
        const ep::Config cfg = config(sms, chunk);
        // DeepEP's tuning calls: a cached dispatch of x alone, and combine
        // of the received rows (recv_x) without weights.
        auto call = [&]() -> Result<void> {
          if (op == EpOp::combine) return discard(combine_of(engine_recv_x, handles[si][0], cfg));
          return discard(cached_dispatch(op == EpOp::dispatch_fp8, handles[si], cfg));
        };
        auto t = timer->run(stream, o.warmup, call, step(),
                            fmt::format("{} at SMs {}, NVL chunk {}", to_string(op), sms, chunk));
        if (!t) return t.error();
        rows.push_back(make_row(op, sms, chunk, true, *t));
      }
      if (me == 0 && o.progress) o.progress(op, sms);
    }
  }
  // One non-cached dispatch per dtype (layout tensors given, the host reads
  // the counts back): what the first dispatch of a batch costs.
  std::vector<EpRow> non_cached;
  for (EpOp op : {EpOp::dispatch_fp8, EpOp::dispatch_bf16}) {
    auto call = [&]() -> Result<void> {
      return discard(full_dispatch(op == EpOp::dispatch_fp8, check_config));
    };
    auto t =
        timer->run(stream, o.warmup, call, step(), fmt::format("non-cached {}", to_string(op)));
    if (!t) return t.error();
    non_cached.push_back(make_row(op, rep.check_sms, rep.check_chunk, false, *t));
  }
  {
    // The same combine from rows the Buffer does not hold (expert outputs
    // written elsewhere): the engine copies them in first.
    auto call = [&]() -> Result<void> {
      return discard(combine(handles[0][0], check_config, false));
    };
    auto t = timer->run(stream, o.warmup, call, step(), "combine of rows outside the Buffer");
    if (!t) return t.error();
    EpRow row = make_row(EpOp::combine, rep.check_sms, rep.check_chunk, true, *t);
    row.staged = true;
    non_cached.push_back(row);
  }

  // Every rank's times and counts to rank 0: the lines print rank 0's, the
  // JSON adds the slowest rank's median.
  nlohmann::json mine = {{"recv_rows", recv_rows}, {"remote_rows", remote_rows}};
  nlohmann::json medians = nlohmann::json::array();
  for (const auto& r : rows) medians.push_back(r.rank0.median_us);
  for (const auto& r : non_cached) medians.push_back(r.rank0.median_us);
  mine["median_us"] = medians;
  EPKIT_TRY(rank.store().set(fmt::format("epbench/times/{}", me), mine.dump(), step()));
  rep.recv_rows.assign(static_cast<std::size_t>(world), 0);
  rep.remote_rows.assign(static_cast<std::size_t>(world), 0);
  rep.recv_rows[static_cast<std::size_t>(me)] = recv_rows;
  rep.remote_rows[static_cast<std::size_t>(me)] = remote_rows;
  if (me == 0) {
    for (int r = 1; r < world; ++r) {
      auto value = rank.store().get(fmt::format("epbench/times/{}", r), step());
      if (!value) return value.error();
      auto j = nlohmann::json::parse(*value, nullptr, false);
      if (!j.is_object() || !j["median_us"].is_array() ||
          j["median_us"].size() != rows.size() + non_cached.size()) {
        return make_error(ErrorCode::internal,
                          fmt::format("bench ep: rank {} sent malformed times", r));
      }
      rep.recv_rows[static_cast<std::size_t>(r)] = j["recv_rows"].get<std::int64_t>();
      rep.remote_rows[static_cast<std::size_t>(r)] = j["remote_rows"].get<std::int64_t>();
      std::size_t i = 0;
      for (auto* list : {&rows, &non_cached}) {
        for (auto& row : *list) {
          row.max_median_us = std::max(row.max_median_us, j["median_us"][i++].get<double>());
        }
      }
    }
  }
  rep.rows = std::move(rows);
  rep.non_cached = std::move(non_cached);
  return rep;
}

}  // namespace epkit::bench

#endif
