// A self-contained smoke and timing run of the EP engine, independent of the
// CLI: forks one process per GPU, meets through the rendezvous store, runs
// layout / dispatch / cached dispatch / combine on rank-constant input and
// checks what must hold (rows constant and equal to their source rank,
// combined = x * ranks reached; a combine staged from outside the Buffer
// gives the same bits), then times cached dispatch (BF16, FP8) and combine,
// and the all-to-all write ceiling of contiguous SM stores (ep_ceiling.cu).
// Usage: epkit_ep_smoke RANKS [TOKENS HIDDEN TOPK EXPERTS SMS CHUNK]
// EP_SMOKE_KILL=r: rank r dies after making the Buffer; the run passes when
// every other rank's dispatch fails within the timeout naming rank r.
// EP_SMOKE_KILL_AT=transfer (with EP_SMOKE_KILL): rank r dies inside a
// transfer instead: after a first dispatch, with its combine's kernels
// running; the survivors' later calls must fail naming it.
// EP_SMOKE_OVERSUBSCRIBE=1: more ranks than GPUs (rank % GPUs), for checks.
// EP_SMOKE_LEG=emulated (with EP_SMOKE_NODES): the device-driven network leg.
// EP_SMOKE_RINGS=1 (with EP_SMOKE_LEG=emulated): ring mode (internode_rings).
// EP_SMOKE_NODES=n (with EP_SMOKE_KILL): an internode Buffer of n nodes faked
// on this host (NCCL_HOSTID per node); the survivors must name the dead rank
// whether they wait for it on NVLink, on the network, or behind a node peer
// stuck on the network (the engine's blame path). The internode data checks
// are `epkit test ep --nnodes`.
#include <cuda_bf16.h>
#include <epkit/ep.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ep/testing.h"
#include "ep_ceiling.h"
#include "ep_harness/store_bootstrap.h"
#include "forked_ranks.h"
#include "runtime/socket.h"
#include "runtime/store.h"

using namespace epkit;
using namespace std::chrono_literals;

namespace {

constexpr int k_killed = 9;
constexpr int k_named_the_dead_rank = 42;
// A survivor on a GPU shared under MPS whose kernels ended because another
// rank's kernel trapped (MPS reports one client's fault to every client): the
// engine says so instead of naming the dead rank itself.
constexpr int k_ended_by_a_peers_fault = 43;

std::string node_host_id(int node) {
  return "ep-smoke-node-" + std::to_string(node);
}

float bf16_to_float(std::uint16_t v) {
  std::uint32_t w = static_cast<std::uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}

/// What a survivor's error must say about the dead rank: it missed a barrier
/// (a node peer), never answered on the network (a rail peer), or a node
/// peer stuck on the network blamed it.
bool names_dead_rank(const std::string& got, const char* dead) {
  const std::string r = std::string("rank ") + dead;
  return got.find(r + " did not reach the engine's barrier") != std::string::npos ||
         got.find(r + " died: its process exited") != std::string::npos ||
         got.find(r + " never answered on the network") != std::string::npos ||
         (got.find(r + " never ") != std::string::npos &&
          got.find("on the network leg") != std::string::npos) ||
         got.find("because " + r + " (on another node)") != std::string::npos;
}

/// EP_SMOKE_KILL_AT=transfer: the doomed rank queues a combine and exits
/// while its kernels move it (a cached dispatch and a combine return before
/// their transfers end); every other rank goes on with combines and cached
/// dispatches until one fails, which must name the dead rank.
int die_in_transfer(ep::Buffer& buf, const ep::DispatchArgs& da, const ep::CombineArgs& ca,
                    const std::shared_ptr<const ep::DispatchHandle>& handle, int rank,
                    const char* kill) {
  if (rank == std::atoi(kill)) {
    (void)buf.combine(ca);
    ::_exit(k_killed);
  }
  ep::DispatchArgs cached = da;
  cached.topk_idx = {};
  cached.topk_weights = {};
  cached.handle = handle;
  std::string got = "every call succeeded after the rank died";
  const auto failed = [&](const auto& result) {
    if (result) return false;
    got = result.error().message;
    return true;
  };
  for (int i = 0; i < 4; ++i)
    if (failed(buf.combine(ca)) || failed(buf.synchronize()) || failed(buf.dispatch(cached)) ||
        failed(buf.synchronize()))
      break;
  std::fprintf(stderr, "rank %d: %s\n", rank, got.c_str());
  if (names_dead_rank(got, kill)) return k_named_the_dead_rank;
  return got.find("another rank's failure") != std::string::npos ? k_ended_by_a_peers_fault : 2;
}

int rank_main(int rank, int ranks, int gpus, std::uint16_t port, int tokens, int hidden, int topk,
              int experts, int sms, int chunk, int nodes) {
  cudaSetDevice(rank % gpus);
  // Before the engine loads NCCL: ranks of different faked nodes must look
  // like different hosts to it.
  if (nodes > 1) ::setenv("NCCL_HOSTID", node_host_id(rank / (ranks / nodes)).c_str(), 1);
  auto session = test::join_forked_store(rank, ranks, port, "smoke");
  if (!session) {
    std::fprintf(stderr, "store: %s\n", session.error().message.c_str());
    return 2;
  }
  harness::StoreBootstrap boot(session->store, rank, ranks, "ep", 20s);
  ep::BufferOptions bo;
  bo.max_tokens = tokens;
  bo.max_hidden = hidden;
  bo.max_topk = topk;
  bo.timeout_s = std::getenv("EP_SMOKE_KILL") != nullptr ? 3 : 10;
  if (nodes > 1) bo.ranks_per_node = ranks / nodes;
  // EP_SMOKE_LEG=emulated: the device-driven network leg over an emulated NIC.
  if (const char* leg = std::getenv("EP_SMOKE_LEG");
      leg != nullptr && std::string(leg) == "emulated")
    bo.network_leg = ep::BufferOptions::NetworkLeg::emulated_nic;
  // EP_SMOKE_RINGS=1 (with the emulated leg): ring mode.
  if (const char* rings = std::getenv("EP_SMOKE_RINGS"); rings != nullptr && rings[0] == '1')
    bo.internode_rings = true;
  // One node: an output arena, for the dispatch whose outputs the senders
  // write directly (below).
  const std::size_t arena_half =
      (static_cast<std::size_t>(ranks) * tokens * (hidden * 2 + topk * 12 + 4) + (4 << 20)) /
      (2 << 20) * (2 << 20);
  if (nodes == 1) bo.output_arena_bytes = 2 * arena_half;
  auto buffer = ep::Buffer::create(boot, bo);
  CHECK_OK(buffer);
  std::fprintf(stderr, "rank %d: buffer made\n", rank);
  // EP_SMOKE_KILL=r: rank r dies here; the others must fail naming it
  // within the Buffer's timeout instead of hanging.
  const char* kill = std::getenv("EP_SMOKE_KILL");
  const char* kill_at = std::getenv("EP_SMOKE_KILL_AT");
  const bool in_transfer =
      kill != nullptr && kill_at != nullptr && std::string(kill_at) == "transfer";
  if (kill != nullptr && !in_transfer && std::atoi(kill) == rank) ::_exit(k_killed);
  ep::Buffer& buf = **buffer;

  // Inputs: x = rank everywhere; top-k from random scores.
  std::mt19937_64 rng(1234 + rank);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(tokens) * topk);
  std::vector<int> perm(static_cast<std::size_t>(experts));
  for (int t = 0; t < tokens; ++t) {
    for (int e = 0; e < experts; ++e) perm[e] = e;
    for (int k = 0; k < topk; ++k) {
      std::uniform_int_distribution<int> d(k, experts - 1);
      std::swap(perm[k], perm[d(rng)]);
      idx[static_cast<std::size_t>(t) * topk + k] = perm[k];
    }
  }
  std::vector<std::uint16_t> xs(static_cast<std::size_t>(tokens) * hidden);
  float rv = static_cast<float>(rank);
  std::uint32_t bits;
  std::memcpy(&bits, &rv, 4);
  std::fill(xs.begin(), xs.end(), static_cast<std::uint16_t>(bits >> 16));
  std::vector<float> ws(static_cast<std::size_t>(tokens) * topk, 0.5f + rank);
  auto x = ep::DeviceTensor::from_host(ep::DType::bf16, tokens, hidden, xs.data());
  CHECK_OK(x);
  auto ti = ep::DeviceTensor::from_host(ep::DType::int64, tokens, topk, idx.data());
  CHECK_OK(ti);
  auto tw = ep::DeviceTensor::from_host(ep::DType::fp32, tokens, topk, ws.data());
  CHECK_OK(tw);

  ep::StreamOrder order;
  auto layout = buf.layout(ti->view, experts, order);
  CHECK_OK(layout);
  ep::DispatchArgs da;
  da.x = x->view;
  da.topk_idx = ti->view;
  da.topk_weights = tw->view;
  da.num_tokens_per_rank = layout->num_tokens_per_rank;
  da.is_token_in_rank = layout->is_token_in_rank;
  da.num_tokens_per_expert = layout->num_tokens_per_expert;
  da.config.num_sms = sms;
  da.config.nvl_chunk = chunk;
  std::fprintf(stderr, "rank %d: layout queued\n", rank);
  auto d = buf.dispatch(da);
  if (kill != nullptr && !in_transfer) {
    // The killed rank never reaches the count exchange: this rank must fail
    // within the Buffer's timeout, naming it.
    std::string got = d ? std::string("dispatch succeeded") : d.error().message;
    std::fprintf(stderr, "rank %d: %s\n", rank, got.c_str());
    if (names_dead_rank(got, kill)) return k_named_the_dead_rank;
    return got.find("another rank's failure") != std::string::npos ? k_ended_by_a_peers_fault : 2;
  }
  CHECK_OK(d);
  std::fprintf(stderr, "rank %d: dispatch queued, %lld rows\n", rank,
               static_cast<long long>(d->recv_x.rows()));
  if (cudaError_t rc = cudaDeviceSynchronize(); rc != cudaSuccess) {
    std::fprintf(stderr, "rank %d: dispatch failed: %s\n", rank, cudaGetErrorString(rc));
    return 3;
  }
  auto prefix = ep::to_host(d->handle->rank_prefix_matrix);
  CHECK_OK(prefix);
  auto recv = ep::to_host(d->recv_x);
  CHECK_OK(recv);
  // Where rows from source rank r end: column `rank` of rank_prefix_matrix
  // on one node; across nodes that matrix is the node's forwarding (local
  // ranks only) and recv_gbl_rank_prefix_sum holds the global prefix.
  std::vector<int> ends(static_cast<std::size_t>(ranks));
  if (nodes > 1) {
    auto gbl = ep::to_host(d->handle->recv_gbl_rank_prefix_sum);
    CHECK_OK(gbl);
    std::memcpy(ends.data(), gbl->data(), ends.size() * sizeof(int));
  } else {
    const int* pm = reinterpret_cast<const int*>(prefix->data());
    for (int r = 0; r < ranks; ++r) ends[static_cast<std::size_t>(r)] = pm[r * ranks + rank];
  }
  int bad = 0;
  int rows = static_cast<int>(d->recv_x.rows());
  for (int row = 0, src = 0; row < rows; ++row) {
    while (src < ranks && row >= ends[static_cast<std::size_t>(src)]) ++src;
    if (src == ranks) {
      std::fprintf(stderr, "rank %d: row %d beyond the prefix over sources (last %d)\n", rank, row,
                   ends.back());
      return 4;
    }
    const auto* r16 = reinterpret_cast<const std::uint16_t*>(recv->data()) +
                      static_cast<std::size_t>(row) * hidden;
    for (int h = 0; h < hidden; h += 97)
      if (bf16_to_float(r16[h]) != static_cast<float>(src) && bad++ < 5)
        std::fprintf(stderr, "rank %d: recv row %d col %d = %g, source %d\n", rank, row, h,
                     bf16_to_float(r16[h]), src);
  }
  ep::CombineArgs ca;
  ca.x = d->recv_x;
  ca.topk_weights = d->recv_topk_weights;
  ca.handle = d->handle;
  ca.config = da.config;
  if (in_transfer) return die_in_transfer(buf, da, ca, d->handle, rank, kill);
  auto c = buf.combine(ca);
  CHECK_OK(c);
  if (cudaError_t rc = cudaDeviceSynchronize(); rc != cudaSuccess) {
    std::fprintf(stderr, "rank %d: combine failed: %s\n", rank, cudaGetErrorString(rc));
    return 3;
  }
  std::fprintf(stderr, "rank %d: combine done\n", rank);
  auto comb = ep::to_host(c->combined_x);
  CHECK_OK(comb);
  auto sr = ep::to_host(d->handle->send_row);
  CHECK_OK(sr);
  const int* send_row = reinterpret_cast<const int*>(sr->data());
  for (int t = 0; t < tokens; ++t) {
    float reached = 0;
    for (int r = 0; r < ranks; ++r) reached += send_row[t * ranks + r] >= 0 ? 1.f : 0.f;
    const auto* c16 =
        reinterpret_cast<const std::uint16_t*>(comb->data()) + static_cast<std::size_t>(t) * hidden;
    for (int h = 0; h < hidden; h += 131)
      if (bf16_to_float(c16[h]) != rank * reached && bad++ < 10)
        std::fprintf(stderr, "rank %d: combined token %d col %d = %g, want %g\n", rank, t, h,
                     bf16_to_float(c16[h]), rank * reached);
  }
  // The same combine from a copy of recv_x outside the heap (the staging
  // path) must give the same bits.
  auto copy = ep::DeviceTensor::zeros(ep::DType::bf16, rows, hidden);
  CHECK_OK(copy);
  cudaMemcpy(copy->view.data, d->recv_x.data, static_cast<std::size_t>(rows) * hidden * 2,
             cudaMemcpyDeviceToDevice);
  ep::CombineArgs outside = ca;
  outside.x = copy->view;
  auto c2 = buf.combine(outside);
  CHECK_OK(c2);
  cudaDeviceSynchronize();
  auto comb2 = ep::to_host(c2->combined_x);
  CHECK_OK(comb2);
  if (*comb2 != *comb) {
    std::fprintf(stderr, "rank %d: combine from outside the heap differs\n", rank);
    ++bad;
  }
  // Outputs in the arena: the same dispatch with every result placed there
  // by DispatchArgs::into must be written there directly (no result left
  // in the Buffer), bit for bit what the Buffer's regions held, and a
  // combine of that recv_x (read in place) must give the same sum.
  const ep::Buffer::Region arena = buf.output_arena();
  if (nodes == 1 && arena.data == nullptr) {
    std::fprintf(stderr, "rank %d: the Buffer made with an output arena has none\n", rank);
    ++bad;
  }
  if (arena.data != nullptr) {
    auto* at = static_cast<std::uint8_t*>(arena.data);
    auto carve = [&](ep::DType dtype, std::int64_t nrows, std::int64_t ncols) {
      auto v = ncols == 0 ? ep::TensorView::vector(at, dtype, nrows)
                          : ep::TensorView::matrix(at, dtype, nrows, ncols);
      at += (static_cast<std::size_t>(nrows) * (ncols == 0 ? 1 : ncols) * ep::dtype_size(dtype) +
             255) /
            256 * 256;
      return v;
    };
    auto pm_out = ep::DeviceTensor::zeros(ep::DType::int32, ranks, ranks);
    CHECK_OK(pm_out);
    std::int64_t asked = -1;
    ep::DispatchArgs ia = da;
    ia.into = [&](std::int64_t n) -> epkit::Result<ep::DispatchOutputs> {
      asked = n;
      at = static_cast<std::uint8_t*>(arena.data);
      ep::DispatchOutputs o;
      o.recv_x = carve(ep::DType::bf16, n, hidden);
      o.recv_topk_idx = carve(ep::DType::int64, n, topk);
      o.recv_topk_weights = carve(ep::DType::fp32, n, topk);
      o.recv_src_idx = carve(ep::DType::int32, n, 0);
      o.rank_prefix_matrix = pm_out->view;
      return o;
    };
    auto di = buf.dispatch(ia);
    CHECK_OK(di);
    cudaDeviceSynchronize();
    const unsigned want = ep::k_out_recv_x | ep::k_out_recv_topk_idx | ep::k_out_recv_topk_weights |
                          ep::k_out_recv_src_idx | ep::k_out_rank_prefix_matrix;
    if (asked != rows || di->written != want || di->recv_x.data != arena.data) {
      std::fprintf(stderr, "rank %d: into asked for %lld rows (want %d), wrote %#x (want %#x)\n",
                   rank, static_cast<long long>(asked), rows, di->written, want);
      ++bad;
    }
    auto got = ep::to_host(di->recv_x);
    CHECK_OK(got);
    auto pm2 = ep::to_host(pm_out->view);
    CHECK_OK(pm2);
    if (*got != *recv || *pm2 != *prefix) {
      std::fprintf(stderr, "rank %d: rows written into the arena differ\n", rank);
      ++bad;
    }
    ep::CombineArgs ci = ca;
    ci.x = di->recv_x;
    ci.topk_weights = di->recv_topk_weights;
    ci.handle = di->handle;
    auto c3 = buf.combine(ci);
    CHECK_OK(c3);
    cudaDeviceSynchronize();
    auto comb3 = ep::to_host(c3->combined_x);
    CHECK_OK(comb3);
    if (*comb3 != *comb) {
      std::fprintf(stderr, "rank %d: combine of the arena's recv_x differs\n", rank);
      ++bad;
    }
    // Cached: x and the source index into the arena again.
    ep::DispatchArgs cia;
    cia.x = x->view;
    cia.handle = di->handle;
    cia.config = da.config;
    cia.into = [&](std::int64_t n) -> epkit::Result<ep::DispatchOutputs> {
      at = static_cast<std::uint8_t*>(arena.data) + arena_half;
      ep::DispatchOutputs o;
      o.recv_x = carve(ep::DType::bf16, n, hidden);
      o.recv_src_idx = carve(ep::DType::int32, n, 0);
      return o;
    };
    auto dc = buf.dispatch(cia);
    CHECK_OK(dc);
    cudaDeviceSynchronize();
    auto got2 = ep::to_host(dc->recv_x);
    CHECK_OK(got2);
    if (dc->written != (ep::k_out_recv_x | ep::k_out_recv_src_idx) || *got2 != *recv) {
      std::fprintf(stderr, "rank %d: cached dispatch into the arena: wrote %#x, rows %s\n", rank,
                   dc->written, *got2 == *recv ? "equal" : "differ");
      ++bad;
    }
  }
  std::printf("rank %d: %d rows received, %d bad values\n", rank, rows, bad);

  // Timing: cached dispatch and combine, events around each call.
  auto time = [&](auto&& call) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    std::vector<float> ms;
    for (int i = 0; i < 60; ++i) {
      cudaEventRecord(a, nullptr);
      call();
      cudaEventRecord(b, nullptr);
      cudaEventSynchronize(b);
      float m = 0;
      cudaEventElapsedTime(&m, a, b);
      if (i >= 10) ms.push_back(m);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2] * 1000.0;
  };
  ep::DispatchArgs cached;
  cached.x = x->view;
  cached.handle = d->handle;
  cached.config = da.config;
  double t_disp = time([&] { (void)buf.dispatch(cached); });
  double t_comb = time([&] { (void)buf.combine(ca); });
  double t_comb_out = time([&] { (void)buf.combine(outside); });
  // FP8: the same routing, 1-byte rows and 56 scales per token.
  auto x8 = ep::DeviceTensor::zeros(ep::DType::fp8_e4m3, tokens, hidden);
  CHECK_OK(x8);
  auto sc = ep::DeviceTensor::zeros(ep::DType::fp32, hidden / 128,
                                    tokens);  // column-major [tokens, hidden/128]
  CHECK_OK(sc);
  ep::DispatchArgs cached8;
  cached8.x = x8->view;
  cached8.x_scales =
      ep::TensorView::column_major(sc->view.data, ep::DType::fp32, tokens, hidden / 128);
  cached8.handle = d->handle;
  cached8.config = da.config;
  double t_fp8 = time([&] { (void)buf.dispatch(cached8); });
  double bytes = static_cast<double>(rows) * hidden * 2;
  if (rank == 0)
    std::printf(
        "SMs %d chunk %d: dispatch %.2f us %.2f GB/s | fp8 %.2f us %.2f GB/s | combine %.2f us "
        "%.2f GB/s | "
        "combine (staged) %.2f us %.2f GB/s\n",
        sms, chunk, t_disp, bytes / t_disp / 1e3, t_fp8, bytes * (1 + 4.0 / 128) / 2 / t_fp8 / 1e3,
        t_comb, bytes / t_comb / 1e3, t_comb_out, bytes / t_comb_out / 1e3);
  CHECK_OK(buf.barrier());

  // The ceiling: contiguous all-to-all SM stores (64 MiB to every peer),
  // after a store barrier so that every rank writes at once.
  if (ranks > 1) {
    const std::int64_t per_peer = std::int64_t{64} << 20;
    auto src = ep::DeviceMemory::allocate(static_cast<std::size_t>(per_peer));
    CHECK_OK(src);
    auto dst = ep::DeviceMemory::allocate(static_cast<std::size_t>(per_peer * ranks));
    CHECK_OK(dst);
    cudaIpcMemHandle_t handle;
    cudaIpcGetMemHandle(&handle, dst->get());
    std::string mine(reinterpret_cast<const char*>(&handle), sizeof(handle));
    std::string hex;
    for (unsigned char ch : mine)
      hex += "0123456789abcdef"[ch >> 4], hex += "0123456789abcdef"[ch & 15];
    auto all = boot.all_gather(hex);
    CHECK_OK(all);
    CeilingArgs args;
    args.src = static_cast<const std::uint8_t*>(src->get());
    args.bytes_per_peer = per_peer;
    args.rank = rank;
    args.ranks = ranks;
    for (int r = 0; r < ranks; ++r) {
      if (r == rank) {
        args.peers[r] = static_cast<std::uint8_t*>(dst->get());
        continue;
      }
      cudaIpcMemHandle_t peer;
      const std::string& h = (*all)[static_cast<std::size_t>(r)];
      for (std::size_t i = 0; i < sizeof(peer); ++i)
        reinterpret_cast<unsigned char*>(&peer)[i] =
            static_cast<unsigned char>(std::stoi(h.substr(2 * i, 2), nullptr, 16));
      void* mapped = nullptr;
      if (cudaIpcOpenMemHandle(&mapped, peer, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess)
        return 5;
      args.peers[r] = static_cast<std::uint8_t*>(mapped);
    }
    for (int blocks : {sms, 132}) {
      std::vector<float> ms;
      for (int rep = 0; rep < 7; ++rep) {
        CHECK_OK(
            session->store.barrier("ceiling/" + std::to_string(blocks) + "/" + std::to_string(rep),
                                   runtime::Deadline::after(20s)));
        cudaEvent_t a, b;
        cudaEventCreate(&a);
        cudaEventCreate(&b);
        cudaEventRecord(a, nullptr);
        launch_all_to_all_write(args, blocks, nullptr);
        cudaEventRecord(b, nullptr);
        cudaEventSynchronize(b);
        float m = 0;
        cudaEventElapsedTime(&m, a, b);
        if (rep > 0) ms.push_back(m);
      }
      std::sort(ms.begin(), ms.end());
      double us = ms[ms.size() / 2] * 1000.0;
      if (rank == 0)
        std::printf(
            "ceiling: %d blocks, %lld MiB to each of %d peers: %.1f us, %.1f GB/s out of each "
            "GPU\n",
            blocks, static_cast<long long>(per_peer >> 20), ranks - 1, us,
            static_cast<double>(per_peer) * (ranks - 1) / us / 1e3);
    }
    CHECK_OK(boot.all_gather("ceiling done"));
    for (int r = 0; r < ranks; ++r)
      if (r != rank) cudaIpcCloseMemHandle(args.peers[r]);
  }
  buffer->reset();
  session->store.close();
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  int ranks = argc > 1 ? std::atoi(argv[1]) : 2;
  int tokens = argc > 2 ? std::atoi(argv[2]) : 4096;
  int hidden = argc > 3 ? std::atoi(argv[3]) : 7168;
  int topk = argc > 4 ? std::atoi(argv[4]) : 8;
  int experts = argc > 5 ? std::atoi(argv[5]) : 256;
  int sms = argc > 6 ? std::atoi(argv[6]) : 24;
  int chunk = argc > 7 ? std::atoi(argv[7]) : 4;
  // EP_SMOKE_OVERSUBSCRIBE=1 puts several ranks on one GPU (rank % GPUs):
  // the engine's 8-rank paths run on a 4-GPU machine, slowly (the GPU
  // time-slices the ranks' spinning kernels), so only the checks count.
  const bool oversubscribe = std::getenv("EP_SMOKE_OVERSUBSCRIBE") != nullptr;
  const int gpus = test::gpus_or_exit(oversubscribe ? 1 : ranks);
  const char* nodes_env = std::getenv("EP_SMOKE_NODES");
  const int nodes = nodes_env != nullptr ? std::atoi(nodes_env) : 1;
  if (nodes < 1 || ranks % nodes != 0 || (nodes > 1 && std::getenv("EP_SMOKE_KILL") == nullptr)) {
    std::fprintf(stderr,
                 "EP_SMOKE_NODES=%s: needs whole nodes of the %d ranks, and EP_SMOKE_KILL (the "
                 "internode data checks are `epkit test ep --nnodes`)\n",
                 nodes_env, ranks);
    return 64;
  }
  const std::uint16_t port = test::free_local_port();
  std::vector<pid_t> kids;
  for (int r = 0; r < ranks; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      std::fflush(stdout);
      ::_exit(rank_main(r, ranks, gpus, port, tokens, hidden, topk, experts, sms, chunk, nodes));
    }
    kids.push_back(pid);
  }
  const char* kill = std::getenv("EP_SMOKE_KILL");
  const int killed = kill != nullptr ? std::atoi(kill) : -1;
  // With a killed rank, success is: it died, and every other rank named it.
  // Where ranks share a GPU, a survivor may instead report that a peer's
  // fault ended its kernels, as long as some survivor named the dead rank.
  const bool shared = gpus < ranks;
  int worst = 0;
  int named = 0;
  for (int r = 0; r < ranks; ++r) {
    int status = 0;
    ::waitpid(kids[static_cast<std::size_t>(r)], &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (killed >= 0) {
      named += code == k_named_the_dead_rank;
      bool ok = r == killed
                    ? code == k_killed
                    : code == k_named_the_dead_rank || (shared && code == k_ended_by_a_peers_fault);
      code = ok ? 0 : std::max(code, 1);
    }
    worst = std::max(worst, code);
  }
  if (killed >= 0 && named == 0) worst = std::max(worst, 1);
  std::printf("ep_smoke: exit %d\n", worst);
  return worst;
}
