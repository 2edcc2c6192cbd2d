// Host time per call of an internode Buffer on the device-driven network leg
// (BufferOptions::network_leg = emulated_nic): ranks as processes sharing
// the GPU, nodes faked, the emulated NIC capped at GBPS. After one dispatch,
// it times cached dispatches and combines two ways: the host's time for the
// call to return (no synchronisation in between: the leg's transfers run on
// the stream) and the device's time per call (events around a batch). On
// the leg the host time must not depend on the cap; the device time must.
// With `overlap` it then times the network leg against the NVLink legs: each
// call run serially (the Buffer's events around its network leg and around
// the rest: pack, forwarding, reduce) and overlapped (the whole call), medians
// of CALLS; the overlapped call over the slower part alone is the figure.
// With `rounds=N` it measures ring mode's overlap at issue 25's ratio in one
// process: three batches of CALLS calls with the NIC at 1000 GB/s (the
// network nearly free) give T_fast, the slowest rank's median; the cap is set
// so that the bytes the busiest NIC carries per call take 1.5 x T_fast (the
// leg alone); then N rounds alternate a batch at 1000 GB/s with a batch at
// the cap. The median capped call over the leg alone is the figure, printed
// beside the leg alone over the rounds' median fast call (the ratio the
// rounds actually ran at: the NVLink legs' speed moves on a shared GPU).
// With EP_LEG_IDLE=1 the first three capped batches also say where each
// rank's NIC sat empty ("leg_idle": the capacity lost, folded over the
// batch's calls into ten bins of a call; "leg_gaps": the stretches over
// 0.3 ms) and, in the first round, each call's kernel span per role
// ("leg_calls", the device's global timer): the trace that found ring
// mode's combine holding its first puts back at every call's start.
// Usage: epkit_ep_leg_host_time RANKS NODES GBPS [TOKENS HIDDEN CALLS
//        [overlap|rounds=N [SMS]]]
// (SMS: the NVLink legs' Config::num_sms, default 24; fewer slow them down,
// so the leg's ratio to them can be set below the emulator's copy ceiling).
// Prints one line per rank: "leg_host_time rank=... host_us dispatch=...",
// and with overlap "leg_overlap rank=... dispatch network_ms=...".
#include <epkit/ep.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ep/internode/buffer.h"
#include "ep/testing.h"
#include "ep_harness/store_bootstrap.h"
#include "forked_ranks.h"

using namespace epkit;
using namespace std::chrono_literals;

namespace {

struct Shape {
  int tokens = 1024, hidden = 7168, topk = 8, experts = 64, calls = 50;
  int sms = 24;  // Config::num_sms of every call (the NVLink legs' kernels)
  bool overlap = false;
  int rounds = 0;  // rounds=N: ring mode's overlap at 1.5x, N rounds in this process
};

/// One whole line with one write(2): ranks share stdout, and stdio's
/// buffers would interleave their lines mid-way.
__attribute__((format(printf, 1, 2))) void print_line(const char* format, ...) {
  char line[1024];
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(line, sizeof line, format, args);
  va_end(args);
  if (n > 0) {
    std::fflush(stdout);
    [[maybe_unused]] auto wrote =
        ::write(1, line, std::min(static_cast<std::size_t>(n), sizeof line - 1));
  }
}

int g_ring_blocks = 12;  // 3 a ring channel: EP_LEG_IDLE's profile slots

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// The overlap figures of one kind of call (a cached dispatch or a combine):
/// run serially, the median network leg and rest; overlapped, the median
/// whole call (events on the caller's stream around it).
template <class Call>
int time_overlap(ep::InternodeBuffer& buf, int calls, Call&& call, double& network_ms,
                 double& rest_ms, double& overlap_ms) {
  std::vector<double> network, rest, whole;
  buf.set_leg_overlap(false);
  if (!buf.time_leg_phases(true)) return 1;
  for (int i = 0; i < calls; ++i) {
    if (!call()) return 1;
    auto phases = buf.last_leg_phases();
    if (!phases) return 1;
    network.push_back(phases->network_ms);
    rest.push_back(phases->rest_ms);
  }
  if (!buf.time_leg_phases(false)) return 1;
  buf.set_leg_overlap(true);
  cudaEvent_t a = nullptr, b = nullptr;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < calls; ++i) {
    cudaEventRecord(a, nullptr);
    if (!call()) return 1;
    cudaEventRecord(b, nullptr);
    if (cudaEventSynchronize(b) != cudaSuccess) return 1;
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    whole.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  network_ms = median(network);
  rest_ms = median(rest);
  overlap_ms = median(whole);
  return 0;
}

/// The largest of each whitespace-separated figure over the ranks' strings;
/// empty when a string holds fewer figures or one that is not a finite
/// number (the strings come from other processes: std::stod would throw).
std::vector<double> largest(const std::vector<std::string>& all, std::size_t figures) {
  std::vector<double> out(figures, 0.0);
  for (const auto& one : all) {
    const char* at = one.c_str();
    for (std::size_t i = 0; i < figures; ++i) {
      char* end = nullptr;
      const double v = std::strtod(at, &end);
      if (end == at || !std::isfinite(v)) return {};
      out[i] = std::max(out[i], v);
      at = end;
    }
  }
  return out;
}

/// EP_LEG_IDLE=1: a batch's calls, each from its start to the last end of
/// each role (senders, forwarders, receivers), us from the first call's
/// start. `words`: the ring profile of every call, 8 words a block.
std::string call_spans(const std::vector<std::uint64_t>& words, int blocks, int calls) {
  const std::size_t per_call = static_cast<std::size_t>(blocks) * 8;
  const std::uint64_t origin = words.empty() ? 0 : words[0];
  const auto rel = [&](std::uint64_t v) { return static_cast<std::int64_t>(v - origin) / 1000; };
  std::string line;
  for (int c = 0; c < calls; ++c) {
    std::uint64_t start = ~0ull, end[3] = {0, 0, 0};
    for (int b = 0; b < blocks; ++b) {
      const std::uint64_t* w = words.data() + per_call * c + static_cast<std::size_t>(b) * 8;
      start = std::min(start, w[0]);
      end[b % 3] = std::max(end[b % 3], w[1]);
    }
    line += fmt::format(" {}:{}-{},{},{}", c, rel(start), rel(end[0]), rel(end[1]), rel(end[2]));
  }
  return line;
}

/// EP_LEG_IDLE=1: where in a batch of `calls` calls of `call_ns` each,
/// started at `t0` (steady_clock ns), the NIC's empty stretches fell.
struct IdleFold {
  double bins_ms[10] = {};  // per call, by tenth of a call
  double total_ms = 0;      // per call
  std::string long_gaps;    // the stretches over 0.3 ms, us from t0
};

IdleFold fold_idle(const ep::InternodeBuffer::NicIdle& idle, std::int64_t t0, double call_ns,
                   int calls) {
  IdleFold fold;
  const auto period = std::max<std::int64_t>(10, std::llround(call_ns));
  for (auto [a, b] : idle.gaps) {
    std::int64_t from = std::max<std::int64_t>(a - t0, 0);
    const std::int64_t to = b - t0;
    if (to <= from) continue;
    fold.total_ms += static_cast<double>(to - from) / 1e6 / calls;
    if (to - from > 300000 && fold.long_gaps.size() < 700)
      fold.long_gaps += fmt::format(" {}-{}", from / 1000, to / 1000);
    while (from < to) {
      const std::int64_t call_at = from / period * period;
      const std::int64_t bin = std::min<std::int64_t>(9, (from - call_at) * 10 / period);
      // At least a nanosecond a step: a bin edge rounded onto `from` ends.
      const std::int64_t edge = std::max(from + 1, std::min(to, call_at + (bin + 1) * period / 10));
      fold.bins_ms[bin] += static_cast<double>(edge - from) / 1e6 / calls;
      from = edge;
    }
  }
  return fold;
}

/// rounds=N (see the file's comment). `measure(call, host_us, device_us)`
/// times a batch of `call`; every figure is the slowest rank's, the NIC's
/// bytes the busiest rank's.
template <class Measure, class Dispatch, class Combine>
int overlap_rounds(ep::Buffer& buf, harness::StoreBootstrap& boot, const Shape& s, int rank,
                   int ranks, int nodes, double nic_d, double nic_c, Measure&& measure,
                   Dispatch&& dispatch, Combine&& combine) {
  auto* inter = dynamic_cast<ep::InternodeBuffer*>(&buf);
  if (inter == nullptr) return 1;
  auto nic = boot.all_gather(std::to_string(nic_d) + " " + std::to_string(nic_c));
  CHECK_OK(nic);
  const auto nic_max = largest(*nic, 2);
  if (nic_max.empty()) {
    std::fprintf(stderr, "rank %d: a rank's NIC bytes did not parse\n", rank);
    return 1;
  }
  const char* idle_env = std::getenv("EP_LEG_IDLE");
  const bool trace_idle = idle_env != nullptr && idle_env[0] == '1';
  auto at_cap = [&](double gbps, auto&& call, double& device_us, const char* what = nullptr,
                    int round = -1) -> int {
    CHECK_OK(inter->set_emulated_nic_gbps(gbps));
    CHECK_OK(buf.barrier());
    const bool traced = trace_idle && what != nullptr && round < 3;
    if (traced) CHECK_OK(inter->take_emulated_nic_idle());  // from here on
    // In the first traced round every call gets its own profile slots.
    const std::size_t per_call = static_cast<std::size_t>(g_ring_blocks) * 8;
    std::vector<std::uint64_t> words;
    std::uint64_t* device_words = nullptr;
    if (traced && round == 0) {
      words.resize(per_call * static_cast<std::size_t>(s.calls));
      CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&device_words), words.size() * 8));
      CHECK_CUDA(cudaMemset(device_words, 0, words.size() * 8));
      CHECK_CUDA(cudaDeviceSynchronize());
    }
    int index = 0;
    auto profiled = [&] {
      if (device_words != nullptr) inter->set_ring_profile(device_words + per_call * index++);
      return call();
    };
    const std::int64_t t0 = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::steady_clock::now().time_since_epoch())
                                .count();
    double host_us = 0, mine = 0;
    const int measured = measure(profiled, host_us, mine);
    if (device_words != nullptr) {
      inter->set_ring_profile(nullptr);
      const cudaError_t rc =
          cudaMemcpy(words.data(), device_words, words.size() * 8, cudaMemcpyDeviceToHost);
      cudaFree(device_words);
      CHECK_CUDA(rc);
    }
    if (measured != 0) return 1;
    if (!words.empty())
      print_line("leg_calls rank=%d %s (call:start-end of senders,forwarders,receivers, us)%s\n",
                 rank, what, call_spans(words, g_ring_blocks, s.calls).c_str());
    if (traced) {
      auto idle = inter->take_emulated_nic_idle();
      CHECK_OK(idle);
      const IdleFold fold = fold_idle(*idle, t0, mine * 1000.0, s.calls);
      std::string bins;
      for (double v : fold.bins_ms) bins += fmt::format(" {:.2f}", v);
      print_line("leg_idle rank=%d %s round=%d call_ms=%.2f lost_ms=%.2f gap_ms=%.2f bins_ms=%s\n",
                 rank, what, round, mine / 1000, static_cast<double>(idle->lost_ns) / 1e6 / s.calls,
                 fold.total_ms, bins.c_str());
      if (round == 0)
        print_line("leg_gaps rank=%d %s (us from the batch's start)%s\n", rank, what,
                   fold.long_gaps.c_str());
    }
    auto all = boot.all_gather(std::to_string(mine));
    CHECK_OK(all);
    const auto slowest = largest(*all, 1);
    if (slowest.empty()) {
      std::fprintf(stderr, "rank %d: a rank's batch time did not parse\n", rank);
      return 1;
    }
    device_us = slowest[0] / 1000;  // ms
    return 0;
  };
  // The caps, from the median of three batches with the network nearly
  // free: the busiest NIC's bytes take 1.5 x that (MB over ms is GB/s).
  std::vector<double> warm_d, warm_c;
  for (int i = 0; i < 3; ++i) {
    double d = 0, c = 0;
    if (at_cap(1000, dispatch, d) != 0 || at_cap(1000, combine, c) != 0) return 1;
    warm_d.push_back(d);
    warm_c.push_back(c);
  }
  const double cap_d = nic_max[0] / (1.5 * median(warm_d));
  const double cap_c = nic_max[1] / (1.5 * median(warm_c));
  const double alone_d = nic_max[0] / cap_d, alone_c = nic_max[1] / cap_c;  // ms
  // Then rounds alternating the fast batches (the NVLink legs alone, as
  // they run now) with the capped ones, the caps fixed.
  std::vector<double> fast_d, fast_c, call_d, call_c;
  for (int round = 0; round < s.rounds; ++round) {
    double fd = 0, fc = 0, cd = 0, cc = 0;
    if (at_cap(1000, dispatch, fd) != 0 || at_cap(1000, combine, fc) != 0 ||
        at_cap(cap_d, dispatch, cd, "dispatch", round) != 0 ||
        at_cap(cap_c, combine, cc, "combine", round) != 0)
      return 1;
    fast_d.push_back(fd);
    fast_c.push_back(fc);
    call_d.push_back(cd);
    call_c.push_back(cc);
    if (rank == 0)
      print_line(
          "leg_rounds round=%d cached dispatch: fast %.2f ms, call %.2f ms | combine: fast "
          "%.2f ms, call %.2f ms\n",
          round, fd, cd, fc, cc);
  }
  // The figure: the median capped call over the leg alone; beside it the
  // leg alone over the median fast call (1.5 when the NVLink legs ran as
  // fast as in the warm-up), and the spread of the rounds.
  const auto spread = [](const std::vector<double>& v, double over) {
    return std::make_pair(*std::min_element(v.begin(), v.end()) / over,
                          *std::max_element(v.begin(), v.end()) / over);
  };
  const auto [lo_d, hi_d] = spread(call_d, alone_d);
  const auto [lo_c, hi_c] = spread(call_c, alone_c);
  if (rank == 0)
    print_line(
        "leg_rounds_median ranks=%d nodes=%d tokens=%d rounds=%d | cached dispatch: nic %.2f MB, "
        "cap %.2f GB/s, leg alone %.2f ms, fast %.2f ms (leg/fast %.2f), call %.2f ms, over the "
        "leg %.3f (rounds %.3f-%.3f) | combine: nic %.2f MB, cap %.2f GB/s, leg alone %.2f ms, "
        "fast %.2f ms (leg/fast %.2f), call %.2f ms, over the leg %.3f (rounds %.3f-%.3f)\n",
        ranks, nodes, s.tokens, s.rounds, nic_max[0], cap_d, alone_d, median(fast_d),
        alone_d / median(fast_d), median(call_d), median(call_d) / alone_d, lo_d, hi_d, nic_max[1],
        cap_c, alone_c, median(fast_c), alone_c / median(fast_c), median(call_c),
        median(call_c) / alone_c, lo_c, hi_c);
  return 0;
}

int rank_main(int rank, int ranks, int nodes, int gpus, std::uint16_t port, double gbps,
              const Shape& s) {
  if (cudaError_t rc = cudaSetDevice(rank % gpus); rc != cudaSuccess) return 2;
  // EP_LEG_BLOCKING_SYNC=1: the ranks' host waits sleep instead of spinning.
  if (const char* b = std::getenv("EP_LEG_BLOCKING_SYNC"); b != nullptr && b[0] == '1')
    if (cudaError_t rc = cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync); rc != cudaSuccess)
      return 2;
  auto session = test::join_forked_store(rank, ranks, port, "leg-host-time");
  if (!session) {
    std::fprintf(stderr, "rank %d: store: %s\n", rank, session.error().message.c_str());
    return 2;
  }
  harness::StoreBootstrap boot(session->store, rank, ranks, "ep", 30s);
  ep::BufferOptions bo;
  bo.max_tokens = s.tokens;
  bo.max_hidden = s.hidden;
  bo.max_topk = s.topk;
  bo.timeout_s = 30;
  bo.ranks_per_node = ranks / nodes;
  bo.network_leg = ep::BufferOptions::NetworkLeg::emulated_nic;
  bo.emulated_nic_gbps = gbps;
  // EP_LEG_RINGS=1: ring mode (BufferOptions::internode_rings).
  if (const char* rings = std::getenv("EP_LEG_RINGS"); rings != nullptr && rings[0] == '1')
    bo.internode_rings = true;
  // EP_LEG_RING=channels,chunk_rows,network_rows,nvl_rows: the rings' shape.
  if (const char* shape = std::getenv("EP_LEG_RING"); shape != nullptr)
    std::sscanf(shape, "%d,%d,%d,%d", &bo.ring_channels, &bo.ring_chunk_rows, &bo.ring_network_rows,
                &bo.ring_nvl_rows);
  // The Buffer's device memory, measured: the GPU's free memory before and
  // after every rank made its Buffer (all ranks share the GPU, so the drop
  // is theirs together), against Buffer::bytes_needed per rank. A first
  // Buffer, made and dropped before, loads the engine's kernels (module
  // code, a one-time cost of the process, not the Buffer's).
  // Also printed: what the first Buffer took (kernels included) and what
  // the GPU had not got back after it went, per rank.
  cudaFree(nullptr);
  std::size_t free_start = 0, free_first = 0, free_before = 0, free_after = 0, total = 0;
  CHECK_OK(boot.all_gather("start"));
  cudaMemGetInfo(&free_start, &total);
  CHECK_OK(boot.all_gather("measured"));
  {
    auto first = ep::Buffer::create(boot, bo);
    CHECK_OK(first);
    CHECK_OK((*first)->barrier());
    CHECK_OK(boot.all_gather("first"));
    cudaMemGetInfo(&free_first, &total);
    CHECK_OK(boot.all_gather("measured"));
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_OK(boot.all_gather("before"));
  cudaMemGetInfo(&free_before, &total);
  CHECK_OK(boot.all_gather("measured"));
  auto buffer = ep::Buffer::create(boot, bo);
  CHECK_OK(buffer);
  CHECK_OK((*buffer)->barrier());
  CHECK_OK(boot.all_gather("after"));
  cudaMemGetInfo(&free_after, &total);
  CHECK_OK(boot.all_gather("measured"));
  const auto per_rank_mb = [&](std::size_t a, std::size_t b) {
    return (static_cast<double>(a) - static_cast<double>(b)) / ranks / 1e6;
  };
  if (rank == 0)
    print_line(
        "leg_memory ranks=%d nodes=%d rings=%d measured_per_rank_mb=%.2f computed_mb=%.2f "
        "first_mb=%.2f not_returned_mb=%.2f\n",
        ranks, nodes, bo.internode_rings ? 1 : 0, per_rank_mb(free_before, free_after),
        static_cast<double>(ep::Buffer::bytes_needed(bo, ranks)) / 1e6,
        per_rank_mb(free_start, free_first), per_rank_mb(free_start, free_before));
  ep::Buffer& buf = **buffer;

  std::mt19937_64 rng(99 + static_cast<unsigned>(rank));
  const auto idx = test::random_topk(rng, s.tokens, s.topk, s.experts);
  auto x = ep::DeviceTensor::zeros(ep::DType::bf16, s.tokens, s.hidden);
  CHECK_OK(x);
  auto ti = ep::DeviceTensor::from_host(ep::DType::int64, s.tokens, s.topk, idx.data());
  CHECK_OK(ti);
  ep::StreamOrder order;
  auto layout = buf.layout(ti->view, s.experts, order);
  CHECK_OK(layout);
  ep::DispatchArgs da;
  da.x = x->view;
  da.topk_idx = ti->view;
  da.num_tokens_per_rank = layout->num_tokens_per_rank;
  da.is_token_in_rank = layout->is_token_in_rank;
  da.num_tokens_per_expert = layout->num_tokens_per_expert;
  da.config.num_sms = s.sms;
  auto d = buf.dispatch(da);
  CHECK_OK(d);
  if (cudaError_t rc = cudaDeviceSynchronize(); rc != cudaSuccess) return 3;

  ep::DispatchArgs cached;
  cached.x = x->view;
  cached.handle = d->handle;
  cached.config.num_sms = s.sms;
  // The combine sums the dispatch's output in place, as DeepEP's
  // test_internode.py does (input in the Buffer: no staging copy).
  ep::CombineArgs ca;
  ca.x = d->recv_x;
  ca.handle = d->handle;
  ca.config.num_sms = s.sms;
  // Host: the median time for a call to return; device: a batch of calls
  // between two events, per call.
  auto measure = [&](auto&& call, double& host_us, double& device_us) -> int {
    std::vector<double> host;
    cudaEvent_t a = nullptr, b = nullptr;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, nullptr);
    for (int i = 0; i < s.calls; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      if (!call()) return 1;
      host.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    cudaEventRecord(b, nullptr);
    if (cudaEventSynchronize(b) != cudaSuccess) return 1;
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    std::sort(host.begin(), host.end());
    host_us = host[host.size() / 2];
    device_us = ms * 1000.0 / s.calls;
    return 0;
  };
  double hd = 0, dd = 0, hc = 0, dc = 0;
  if (measure([&] { return buf.dispatch(cached).ok(); }, hd, dd) != 0 ||
      measure([&] { return buf.combine(ca).ok(); }, hc, dc) != 0) {
    std::fprintf(stderr, "rank %d: a timed call failed\n", rank);
    return 1;
  }
  // The bytes this rank's NIC carries per call in ring mode (the network
  // leg alone takes them over the cap): a cached dispatch puts each token's
  // row once per other node it reaches; a combine puts back, for each other
  // node n, the sums of the rows rank (n, this local rank) sent here.
  const int per = ranks / nodes;
  const int node = rank / per;
  auto in_rank = ep::to_host(layout->is_token_in_rank);
  CHECK_OK(in_rank);
  std::vector<long long> to_node(static_cast<std::size_t>(nodes), 0);
  const auto* in = reinterpret_cast<const bool*>(in_rank->data());
  for (int t = 0; t < s.tokens; ++t)
    for (int m = 0; m < nodes; ++m)
      for (int g = 0; g < per; ++g)
        if (in[static_cast<std::size_t>(t) * ranks + m * per + g]) {
          ++to_node[static_cast<std::size_t>(m)];
          break;
        }
  std::string mine;
  for (long long v : to_node) mine += std::to_string(v) + " ";
  auto all = boot.all_gather(mine);
  CHECK_OK(all);
  long long sent = 0, returned = 0;
  for (int m = 0; m < nodes; ++m) {
    if (m == node) continue;
    sent += to_node[static_cast<std::size_t>(m)];
    // Rank (m, this local rank)'s rows to this node.
    const std::string& theirs = (*all)[static_cast<std::size_t>(m * per + rank % per)];
    long long v = 0;
    int at = 0, k = 0;
    for (int used = 0; std::sscanf(theirs.c_str() + at, "%lld%n", &v, &used) == 1; at += used, ++k)
      if (k == node) returned = returned + v;
  }
  const double pitch =
      ep::row_format(ep::DType::bf16, s.hidden, 0, 0, false, per).pitch;  // a cached row
  const double nic_mb_dispatch = static_cast<double>(sent) * pitch / 1e6;
  const double nic_mb_combine = static_cast<double>(returned) * s.hidden * 2 / 1e6;
  print_line(
      "leg_host_time rank=%d ranks=%d nodes=%d cap_gbps=%g tokens=%d rows=%lld host_us "
      "dispatch=%.1f combine=%.1f device_us dispatch=%.1f combine=%.1f nic_mb dispatch=%.2f "
      "combine=%.2f\n",
      rank, ranks, nodes, gbps, s.tokens, static_cast<long long>(d->recv_x.rows()), hd, hc, dd, dc,
      nic_mb_dispatch, nic_mb_combine);
  // EP_LEG_PROFILE=1 (ring mode): when each block of one cached dispatch
  // and one combine starts and ends, in us from the earliest start.
  if (const char* prof = std::getenv("EP_LEG_PROFILE"); prof != nullptr && prof[0] == '1') {
    auto* inter = dynamic_cast<ep::InternodeBuffer*>(&buf);
    if (inter == nullptr) return 1;
    std::uint64_t* words = nullptr;
    const int blocks = 3 * bo.ring_channels;
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&words), static_cast<std::size_t>(blocks) * 64));
    inter->set_ring_profile(words);
    for (const char* op : {"dispatch", "combine"}) {
      CHECK_CUDA(cudaMemset(words, 0, static_cast<std::size_t>(blocks) * 64));
      CHECK_CUDA(cudaDeviceSynchronize());
      const bool ok = op[0] == 'd' ? buf.dispatch(cached).ok() : buf.combine(ca).ok();
      CHECK_CUDA(cudaDeviceSynchronize());
      std::vector<std::uint64_t> host(static_cast<std::size_t>(blocks) * 8);
      CHECK_CUDA(cudaMemcpy(host.data(), words, host.size() * 8, cudaMemcpyDeviceToHost));
      std::uint64_t first = ~0ull;
      for (int b = 0; b < blocks; ++b)
        first = std::min(first, host[static_cast<std::size_t>(b) * 8]);
      std::string line;
      for (int b = 0; b < blocks; ++b) {
        const std::uint64_t* w = host.data() + static_cast<std::size_t>(b) * 8;
        line += " " + std::to_string(b % 3) + ":" + std::to_string((w[0] - first) / 1000) + "-" +
                std::to_string((w[1] - first) / 1000) + "/" + std::to_string(w[2] / 1000) + "," +
                std::to_string(w[3] / 1000) + "," + std::to_string(w[4] / 1000) + "," +
                std::to_string(w[5] / 1000) + "," + std::to_string(w[6] / 1000) + "," +
                std::to_string(w[7]);
      }
      print_line(
          "leg_profile rank=%d %s ok=%d blocks(role:start-end/nvl,credit,put,chunk,grant "
          "us,puts)%s\n",
          rank, op, ok ? 1 : 0, line.c_str());
    }
    inter->set_ring_profile(nullptr);
    cudaFree(words);
  }
  g_ring_blocks = 3 * bo.ring_channels;
  if (s.rounds > 0 &&
      overlap_rounds(
          buf, boot, s, rank, ranks, nodes, nic_mb_dispatch, nic_mb_combine, measure,
          [&] { return buf.dispatch(cached).ok(); }, [&] { return buf.combine(ca).ok(); }) != 0) {
    std::fprintf(stderr, "rank %d: an overlap round failed\n", rank);
    return 1;
  }
  if (s.overlap) {
    auto* inter = dynamic_cast<ep::InternodeBuffer*>(&buf);
    if (inter == nullptr) {
      std::fprintf(stderr, "rank %d: not an internode Buffer\n", rank);
      return 1;
    }
    double dn = 0, dr = 0, dw = 0, cn = 0, cr = 0, cw = 0;
    if (time_overlap(
            *inter, s.calls, [&] { return buf.dispatch(cached).ok(); }, dn, dr, dw) != 0 ||
        time_overlap(
            *inter, s.calls, [&] { return buf.combine(ca).ok(); }, cn, cr, cw) != 0) {
      std::fprintf(stderr, "rank %d: a timed call failed\n", rank);
      return 1;
    }
    print_line(
        "leg_overlap rank=%d ranks=%d nodes=%d cap_gbps=%g tokens=%d dispatch network_ms=%.3f "
        "rest_ms=%.3f network/rest=%.2f overlapped_ms=%.3f over_slower=%.3f combine "
        "network_ms=%.3f rest_ms=%.3f network/rest=%.2f overlapped_ms=%.3f over_slower=%.3f\n",
        rank, ranks, nodes, gbps, s.tokens, dn, dr, dn / dr, dw, dw / std::max(dn, dr), cn, cr,
        cn / cr, cw, cw / std::max(cn, cr));
  }
  CHECK_OK(buf.barrier());
  buffer->reset();
  session->store.close();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 2;
  const int nodes = argc > 2 ? std::atoi(argv[2]) : 2;
  const double gbps = argc > 3 ? std::atof(argv[3]) : 50;
  Shape s;
  int* fields[] = {&s.tokens, &s.hidden, &s.calls};
  for (int i = 4; i < argc && i - 4 < 3; ++i) *fields[i - 4] = std::atoi(argv[i]);
  const std::string mode = argc > 7 ? argv[7] : "";
  s.overlap = mode == "overlap";
  if (mode.rfind("rounds=", 0) == 0) s.rounds = std::atoi(mode.c_str() + 7);
  if (argc > 8) s.sms = std::atoi(argv[8]);
  if (ranks < 2 || nodes < 2 || ranks % nodes != 0 || !(gbps > 0) || s.tokens < 1 ||
      s.tokens > 65536 || s.hidden < 128 || s.hidden > 65536 || s.hidden % 128 != 0 ||
      s.calls < 1 || s.calls > 100000 || (!mode.empty() && !s.overlap && s.rounds == 0) ||
      s.rounds < 0 || s.rounds > 1000 || s.sms < 1 || s.sms > 132) {
    std::fprintf(stderr,
                 "usage: epkit_ep_leg_host_time RANKS NODES GBPS [TOKENS HIDDEN CALLS "
                 "[overlap|rounds=N [SMS]]]\n");
    return 64;
  }
  const int gpus = test::gpus_or_exit(1);
  const std::uint16_t port = test::free_local_port();
  const auto codes = test::wait_ranks(test::fork_ranks(ranks, [&](int r) {
    // Before anything loads NCCL: each faked node looks like its own host.
    ::setenv("NCCL_HOSTID", ("leg-node-" + std::to_string(r / (ranks / nodes))).c_str(), 1);
    return rank_main(r, ranks, nodes, gpus, port, gbps, s);
  }));
  const int worst = *std::max_element(codes.begin(), codes.end());
  std::printf("ep_leg_host_time: exit %d\n", worst);
  return worst;
}
