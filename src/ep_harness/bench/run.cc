// The GPU half of `epkit bench ep` (run.h): the checks against
// the reference path (compare.h), the dump (dump.h), then DeepEP-style timing
// of the engine (timing.h).
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <utility>

#include "base/cuda_error.h"
#include "ep/testing.h"
#include "ep_harness/bench/compare.h"
#include "ep_harness/bench/dump.h"
#include "ep_harness/bench/run.h"
#include "ep_harness/bench/host_copies.h"
#include "ep_harness/bench/timing.h"
#include "ep_harness/bench/verdicts.h"
#include "ep_harness/reference.h"
#include "ep_harness/store_bootstrap.h"
#include "ep_harness/testdata.h"
#include "runtime/peer_json.h"

namespace epkit::harness {
namespace {

using namespace detail;

using Handles = std::array<std::shared_ptr<const ep::DispatchHandle>, 2>;  // BF16, FP8

// The checks in the order they are printed; each rank fills one verdict per
// entry ("" = passed). Across nodes the engine has no recv_src_idx and its
// rank prefix is recv_gbl_rank_prefix_sum (DeepEP's internode handle).
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
constexpr CheckSpec k_internode_checks[k_num_checks] = {
    {"layout",
     "num_tokens_per_rank, num_tokens_per_rdma_rank, num_tokens_per_expert, is_token_in_rank"},
    {"dispatch (BF16)",
     "recv_x, recv_topk_idx, recv_topk_weights bitwise; row and per-expert counts, "
     "recv_gbl_rank_prefix_sum"},
    k_checks[2],
    {"dispatch (FP8)", "recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights bitwise; counts"},
    k_checks[4],
    k_checks[5],
};

Result<void> exchange_checks(runtime::Store& store, int me, int world, Deadline deadline,
                             const std::vector<std::string>& mine, bench::EpReport& rep) {
  const auto& specs = rep.internode() ? k_internode_checks : k_checks;
  auto checks = exchange_verdicts(store, "epbench/checks", me, world, deadline, mine,
                                  {std::begin(specs), std::end(specs)});
  if (!checks) return checks.error();
  rep.checks = std::move(*checks);
  return {};
}

}  // namespace

ep::BufferOptions ep_buffer_options(const runtime::LaunchInfo& launch, const EpBenchOptions& o) {
  ep::BufferOptions bo;
  bo.max_tokens = o.shape.tokens;
  bo.max_hidden = o.shape.hidden;
  bo.max_topk = o.shape.topk;
  bo.timeout_s = o.timeout_s;
  if (launch.nnodes > 1 && launch.local_world_size > 0 &&
      launch.local_world_size < launch.world_size) {
    bo.ranks_per_node = launch.local_world_size;
  }
  return bo;
}

Result<std::unique_ptr<ep::Buffer>> make_ep_buffer(runtime::GpuRank& rank,
                                                   const EpBenchOptions& o) {
  StoreBootstrap boot(rank.store(), rank.launch.rank, rank.launch.world_size, "epbench/buffer",
                      runtime::Millis(static_cast<std::int64_t>(o.timeout_s * 1000.0)));
  return ep::Buffer::create(boot, ep_buffer_options(rank.launch, o));
}

namespace {

// The bytes the internode engine sends per row, read from its own row
// format (through ep/testing.h), so that the physical figure
// follows the engine if the format changes.
bench::EpWireRows wire_rows(const ep::BufferOptions& bo, int ranks, int hidden, int topk,
                            ep::DType idx_dtype) {
  using ep::DType;
  const int per_node = bo.ranks_per_node;
  const int idx = static_cast<int>(ep::dtype_size(idx_dtype));
  bench::EpWireRows w;
  w.dispatch_fp8 = ep::testing::internode_row_bytes(DType::fp8_e4m3, hidden, 0, 0, false, per_node);
  w.dispatch_bf16 = ep::testing::internode_row_bytes(DType::bf16, hidden, 0, 0, false, per_node);
  w.full_fp8 = ep::testing::internode_row_bytes(DType::fp8_e4m3, hidden, idx, topk, true, per_node);
  w.full_bf16 = ep::testing::internode_row_bytes(DType::bf16, hidden, idx, topk, true, per_node);
  w.combine = static_cast<std::int64_t>(hidden) * 2;
  const int nodes = ranks / std::max(per_node, 1);
  w.messages = (nodes - 1) * ep::testing::internode_message_bytes(bo, ranks);
  return w;
}

}  // namespace

Result<bench::EpReport> run_ep_bench(runtime::GpuRank& rank, ep::Buffer& buffer,
                                     const EpBenchOptions& o) {
  const int me = buffer.rank();
  const int world = buffer.num_ranks();
  const int nodes = buffer.num_nodes();
  const bool internode = nodes > 1;
  const int per_node = world / nodes;
  const Comparer who{me, world, internode};
  auto step = [&] { return Deadline::after_seconds(o.timeout_s); };
  runtime::NcclSession& session = *rank.session;

  bench::EpReport rep;
  rep.shape = o.shape;
  rep.shape.ranks = world;
  rep.shape.nodes = nodes;
  if (internode) rep.network = buffer.network();
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

  TestInputOptions io;
  io.shape = {o.shape.tokens, o.shape.hidden, o.shape.topk, o.shape.experts};
  io.kind = XKind::random;
  io.seed = o.seed;
  io.rank = me;
  io.num_ranks = world;
  auto inputs = make_test_inputs(io, stream);
  if (!inputs) return inputs.error();
  // The reference runs on the session's stream: the inputs must be there.
  EPKIT_TRY(sync("making the test inputs"));

  auto comm = session.blocking_comm(step());
  if (!comm) return comm.error();
  NcclContext nccl{&session.api(), *comm, session.stream(), me, world};
  // Across nodes the reference combine rounds per node, then sums the
  // nodes, as the internode engine does.
  if (internode) nccl.ranks_per_node = per_node;
  if (internode) {
    rep.wire = wire_rows(ep_buffer_options(rank.launch, o), world, o.shape.hidden, o.shape.topk,
                         inputs->topk_idx.view.dtype);
  }

  ep::StreamOrder order;
  order.stream = stream;
  const TensorView& topk_idx = inputs->topk_idx.view;
  const TensorView& topk_weights = inputs->topk_weights.view;
  const TensorView& x_bf16 = inputs->x.view;
  const TensorView& x_fp8 = inputs->x_fp8.view;
  const TensorView& x_scales = inputs->x_scales_view;

  std::vector<std::string> verdict(k_num_checks);
  bench::EpRankBytes bytes;
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
  auto ref_bf16 = reference_dispatch(nccl, ref_args, o.shape.experts);
  if (!ref_bf16) return ref_bf16.error();
  ref_args.x = x_fp8;
  ref_args.x_scales = x_scales;
  auto ref_fp8 = reference_dispatch(nccl, ref_args, o.shape.experts);
  if (!ref_fp8) return ref_fp8.error();
  // Combine inputs for every check and for the timing: the reference's BF16
  // rows, which the engine's must equal, in memory the Buffer does not own
  // (as DeepEP's recv_x, or expert outputs, would be).
  const TensorView& combine_x = ref_bf16->recv_x.view;
  const TensorView& combine_w = ref_bf16->recv_topk_weights.view;
  auto ref_comb = reference_combine(nccl, *ref_bf16, combine_x, combine_w);
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
    const HostLayout& hl = ref_bf16->layout;
    std::string& v = verdict[0];
    note(v, compare_ints("num_tokens_per_rank", as_ints(*per_rank), hl.num_tokens_per_rank));
    note(v, compare_ints("num_tokens_per_expert", as_ints(*per_expert), hl.num_tokens_per_expert));
    if (in_rank->bytes != hl.is_token_in_rank) {
      note(v, "is_token_in_rank differs from the host's");
    }
    if (internode) {
      // The (token, node) pairs DeepEP's RDMA figure counts, from the host's
      // routing; the engine's count must agree.
      const std::vector<int> host_per_node =
          bench::ep_tokens_per_node(hl.is_token_in_rank, world, per_node);
      auto per_node_dev = ep::to_host(layout->num_tokens_per_rdma_rank);
      if (!per_node_dev) return per_node_dev.error();
      note(v, compare_ints("num_tokens_per_rdma_rank", as_ints(*per_node_dev), host_per_node));
      bytes.pairs = bench::ep_node_pairs(host_per_node, me / per_node);
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
  for (int fp8 = 0; fp8 < 2; ++fp8) {
    auto d = full_dispatch(fp8 != 0, check_config);
    if (!d) return d.error();
    EPKIT_TRY(sync(fp8 ? "dispatch (FP8)" : "dispatch (BF16)"));
    auto host = copy_dispatch(*d, true);
    if (!host) return host.error();
    verdict[fp8 ? 3 : 1] = compare_dispatch(*host, fp8 ? *host_ref_fp8 : *host_ref_bf16, true, who);
    handles[0][fp8] = d->handle;
    if (!fp8) {
      bytes.recv_rows = host->rows;
      bytes.remote_rows =
          internode ? bench::ep_nvl_remote_rows(host->recv_gbl_rank_prefix_sum, per_node, me)
                    : bench::ep_remote_rows(host->rank_prefix_matrix, world, me);
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
  auto make_row = [&](bench::EpOp op, int sms, int chunk, bool cached, const bench::EpTiming& t) {
    bench::EpRow row;
    row.op = op;
    row.sms = sms;
    row.nvl_chunk = chunk;
    row.cached = cached;
    row.rank0 = t;
    row.max_median_us = t.median_us;
    ep_fill_bytes(row, rep.shape, bytes, rep.wire);
    return row;
  };
  // Results are dropped: only the time counts, and each call's outputs
  // replace the last one's.
  auto discard = [](auto&& r) -> Result<void> {
    if (!r) return r.error();
    return {};
  };
  std::vector<bench::EpRow> rows;
  for (bench::EpOp op :
       {bench::EpOp::dispatch_fp8, bench::EpOp::dispatch_bf16, bench::EpOp::combine}) {
    for (std::size_t si = 0; si < o.sms.size(); ++si) {
      const int sms = o.sms[si];
      TensorView engine_recv_x;
      if (op == bench::EpOp::combine) {
        auto d = cached_dispatch(false, handles[si], config(sms, o.chunks.front()));
        if (!d) return d.error();
        engine_recv_x = d->recv_x;
      }
      for (int chunk : o.chunks) {
        const ep::Config cfg = config(sms, chunk);
        // DeepEP's tuning calls: a cached dispatch of x alone, and combine
        // of the received rows (recv_x) without weights.
        auto call = [&]() -> Result<void> {
          if (op == bench::EpOp::combine)
            return discard(combine_of(engine_recv_x, handles[si][0], cfg));
          return discard(cached_dispatch(op == bench::EpOp::dispatch_fp8, handles[si], cfg));
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
  std::vector<bench::EpRow> non_cached;
  for (bench::EpOp op : {bench::EpOp::dispatch_fp8, bench::EpOp::dispatch_bf16}) {
    auto call = [&]() -> Result<void> {
      return discard(full_dispatch(op == bench::EpOp::dispatch_fp8, check_config));
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
    bench::EpRow row = make_row(bench::EpOp::combine, rep.check_sms, rep.check_chunk, true, *t);
    row.staged = true;
    non_cached.push_back(row);
  }

  // Every rank's times and counts to rank 0: the lines print rank 0's, the
  // JSON adds the slowest rank's median.
  struct PerRank {
    const char* key;
    std::vector<std::int64_t>* all;
    std::int64_t mine;
  };
  std::vector<PerRank> per_rank = {{"recv_rows", &rep.recv_rows, bytes.recv_rows},
                                   {"remote_rows", &rep.remote_rows, bytes.remote_rows}};
  if (internode) {
    per_rank.push_back({"node_pairs", &rep.node_pairs, bytes.pairs.all});
    per_rank.push_back({"remote_node_pairs", &rep.remote_node_pairs, bytes.pairs.remote});
  }
  nlohmann::json mine = nlohmann::json::object();
  for (const auto& p : per_rank) {
    mine[p.key] = p.mine;
    p.all->assign(static_cast<std::size_t>(world), 0);
    (*p.all)[static_cast<std::size_t>(me)] = p.mine;
  }
  nlohmann::json medians = nlohmann::json::array();
  for (const auto& r : rows) medians.push_back(r.rank0.median_us);
  for (const auto& r : non_cached) medians.push_back(r.rank0.median_us);
  mine["median_us"] = medians;
  EPKIT_TRY(rank.store().set(fmt::format("epbench/times/{}", me), mine.dump(), step()));
  if (me == 0) {
    for (int r = 1; r < world; ++r) {
      auto value = rank.store().get(fmt::format("epbench/times/{}", r), step());
      if (!value) return value.error();
      // Another process's JSON: every field checked before use, no throwing
      // accessor (runtime/peer_json.h).
      auto malformed = [r] {
        return make_error(ErrorCode::internal,
                          fmt::format("bench ep: rank {} sent malformed times", r));
      };
      auto j = runtime::peer::parse(*value);
      const auto* medians_in = runtime::peer::field(j, "median_us");
      if (medians_in == nullptr || !medians_in->is_array() ||
          medians_in->size() != rows.size() + non_cached.size()) {
        return malformed();
      }
      for (const auto& p : per_rank) {
        // Absent is 0, as before; present, it must be a count.
        auto count = runtime::peer::field(j, p.key) == nullptr
                         ? std::optional<std::int64_t>(0)
                         : runtime::peer::int_field(j, p.key, 0);
        if (!count) return malformed();
        (*p.all)[static_cast<std::size_t>(r)] = *count;
      }
      std::size_t i = 0;
      for (auto* list : {&rows, &non_cached}) {
        for (auto& row : *list) {
          auto median = runtime::peer::number_value((*medians_in)[i++]);
          if (!median) return malformed();
          row.max_median_us = std::max(row.max_median_us, *median);
        }
      }
    }
  }
  rep.rows = std::move(rows);
  rep.non_cached = std::move(non_cached);
  return rep;
}

}  // namespace epkit::harness
