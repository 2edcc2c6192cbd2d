// InternodeBuffer: creation (the node's intranode Buffer, then the rail's
// network), its memory, layout, barrier and the bounded host waits on the
// network leg.
#include "ep/internode/buffer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "ep/internode/checks.h"
#include "ep/intranode/checks.h"

namespace epkit::ep {
namespace {

constexpr std::size_t k_align = 256;

std::size_t align_up(std::size_t v, std::size_t a = k_align) {
  return (v + a - 1) / a * a;
}

/// The node's ranks' view of the Buffer's bootstrap: every all_gather still
/// runs over every rank (all nodes make the same calls), each node keeps its
/// own slice.
class NodeBootstrap final : public Bootstrap {
 public:
  NodeBootstrap(Bootstrap& all, int ranks_per_node)
      : m_all(all), m_per_node(ranks_per_node), m_node(all.rank() / ranks_per_node) {}
  int rank() const override { return m_all.rank() % m_per_node; }
  int world_size() const override { return m_per_node; }
  Result<std::vector<std::string>> all_gather(const std::string& mine) override {
    auto all = m_all.all_gather(mine);
    if (!all) return all.error();
    auto first = all->begin() + static_cast<std::ptrdiff_t>(m_node) * m_per_node;
    return std::vector<std::string>(first, first + m_per_node);
  }

 private:
  Bootstrap& m_all;
  int m_per_node;
  int m_node;
};

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size(); ++i)
    s += fmt::format("{}{}", i == 0 ? "" : (i + 1 == ranks.size() ? " or " : ", "), ranks[i]);
  return s;
}

}  // namespace

k::RowFormat row_format(DType x_dtype, int hidden, int topk_size, int num_topk, bool with_weights,
                        int ranks_per_node) {
  k::RowFormat f;
  f.x_bytes = hidden * static_cast<int>(dtype_size(x_dtype));
  int at = f.x_bytes;  // a multiple of 16: the int64 top-k that follows stays aligned
  f.topk_size = topk_size;
  f.num_topk = topk_size > 0 ? num_topk : 0;
  f.topk_offset = at;
  at += f.num_topk * topk_size;
  f.num_scales = x_dtype == DType::fp8_e4m3 ? hidden / k::k_scale_block : 0;
  f.scales_offset = at;
  at += f.num_scales * 4;
  f.with_weights = with_weights && f.num_topk > 0;
  f.weights_offset = at;
  at += f.with_weights ? f.num_topk * 4 : 0;
  f.src_offset = at;
  at += 4;
  f.mask_offset = at;
  f.ranks_per_node = ranks_per_node;
  at += ranks_per_node;
  f.pitch = static_cast<int>(align_up(static_cast<std::size_t>(at), 16));
  return f;
}

InternodeLayout internode_layout(const BufferOptions& o, int num_ranks) {
  InternodeLayout l;
  const int per_node = std::max(o.ranks_per_node, 1);
  const std::size_t nodes = static_cast<std::size_t>(num_ranks / per_node);
  const std::size_t tokens = static_cast<std::size_t>(std::max(o.max_tokens, 0));
  const std::size_t hidden = static_cast<std::size_t>(std::max(o.max_hidden, 0));
  const std::size_t topk = static_cast<std::size_t>(std::max(o.max_topk, 0));
  // The widest row: BF16 x (FP8 rows are half as wide plus scales, narrower).
  l.pitch = static_cast<std::size_t>(
      row_format(DType::bf16, static_cast<int>(hidden), 8, static_cast<int>(topk), true, per_node)
          .pitch);
  // Room for every expert a node can have; a multiple of 4 ints.
  const int experts = k::k_max_experts * per_node / std::max(num_ranks, 1);
  l.message_ints =
      (k::MessageFormat{per_node, experts, static_cast<int>(nodes)}.min_ints() + 3) / 4 * 4;
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    std::size_t here = at;
    at = align_up(at + bytes);
    return here;
  };
  l.buckets = take(nodes * tokens * l.pitch);
  l.rows = take(nodes * tokens * l.pitch);
  l.partial_x = take(nodes * tokens * hidden * 2);
  l.partial_w = take(nodes * tokens * topk * 4);
  l.out_x = take(tokens * hidden * 2);
  l.out_w = take(tokens * topk * 4);
  l.per_rank = take(static_cast<std::size_t>(num_ranks) * 4);
  l.per_node = take(nodes * 4);
  l.per_expert = take(k::k_max_experts * 4);
  l.in_rank = take(tokens * static_cast<std::size_t>(num_ranks));
  l.send_messages = take(nodes * static_cast<std::size_t>(l.message_ints) * 4);
  l.recv_messages = take(nodes * static_cast<std::size_t>(l.message_ints) * 4);
  l.leg_counters = take(4 * 4 * sizeof(std::uint64_t));  // InternodeBuffer::leg_counter
  l.leg_done = take(nodes * k::k_leg_chunks * sizeof(std::int32_t));
  l.barrier = take(nodes * 4);
  l.total = at;
  return l;
}

BufferOptions forwarding_options(const BufferOptions& o, int num_ranks) {
  BufferOptions f = o;
  const int nodes = num_ranks / std::max(o.ranks_per_node, 1);
  f.max_tokens = o.max_tokens * nodes;
  f.ranks_per_node = 0;
  f.num_bytes = 0;
  f.output_arena_bytes = 0;  // an internode dispatch leaves its results in the Buffer
  if (o.internode_rings) {
    // Ring mode forwards through NVLink rings in the node's shared heap (the
    // arena's place) and never through the node Buffer's receive regions.
    f.max_tokens = 1;
    auto rings = ring_memory(o, num_ranks);
    f.output_arena_bytes = rings ? rings->nvl_bytes : 0;
  }
  // A rank stuck on the network gives up after timeout_s and tells its node
  // whom to blame; its node's peers must still be waiting then.
  f.timeout_s = 2 * o.timeout_s + 1;
  return f;
}

Result<MappedMemory> MappedMemory::allocate(std::size_t bytes) {
  MappedMemory m;
  cudaError_t rc = cudaHostAlloc(&m.m_host, std::max<std::size_t>(bytes, 1), cudaHostAllocMapped);
  if (rc != cudaSuccess) return cuda_error(rc, fmt::format("cudaHostAlloc of {} bytes", bytes));
  std::memset(m.m_host, 0, bytes);
  if ((rc = cudaHostGetDevicePointer(&m.m_device, m.m_host, 0)) != cudaSuccess)
    return cuda_error(rc, "cudaHostGetDevicePointer");
  return m;
}

MappedMemory::MappedMemory(MappedMemory&& other) noexcept
    : m_host(other.m_host), m_device(other.m_device) {
  other.m_host = other.m_device = nullptr;
}

MappedMemory& MappedMemory::operator=(MappedMemory&& other) noexcept {
  std::swap(m_host, other.m_host);
  std::swap(m_device, other.m_device);
  return *this;
}

MappedMemory::~MappedMemory() {
  if (m_host != nullptr) cudaFreeHost(m_host);
}

InternodeBuffer::~InternodeBuffer() {
  // A failed Buffer's communicator is aborted, not destroyed: ncclCommDestroy
  // waits for the peers and for this context's work, neither of which may
  // ever come after a peer died or a kernel faulted (a survivor of a rank
  // killed in a transfer hung here on the H200 until its 100 s bound).
  if (m_net != nullptr && (m_broken || (m_local != nullptr && m_local->broken()))) m_net->abort();
  stop_leg();
  if (m_leg_fork != nullptr) cudaEventDestroy(m_leg_fork);
  if (m_leg_join != nullptr) cudaEventDestroy(m_leg_join);
  if (m_leg_stream != nullptr) cudaStreamDestroy(m_leg_stream);
  for (cudaEvent_t e : m_phase)
    if (e != nullptr) cudaEventDestroy(e);
  if (m_net_done != nullptr) cudaEventDestroy(m_net_done);
  if (m_pre_net != nullptr) cudaEventDestroy(m_pre_net);
}

Result<void> InternodeBuffer::init(Bootstrap& bootstrap, const BufferOptions& o) {
  m_opts = o;
  m_rank = bootstrap.rank();
  m_ranks = bootstrap.world_size();
  m_per_node = o.ranks_per_node;
  EPKIT_TRY(check_internode_options(o, m_ranks));
  m_nodes = m_ranks / m_per_node;
  m_node = m_rank / m_per_node;
  m_local_rank = m_rank % m_per_node;
  m_mem_layout = internode_layout(o, m_ranks);
  m_rings = o.internode_rings;
  if (m_rings) {
    // check_internode_options made sure the options give a map.
    m_ring = ring_memory(o, m_ranks).value();
    // The regions layout(), barrier() and the leg exchanges use, in ring
    // mode's memory; the others stay unused.
    InternodeLayout l;
    l.pitch = m_mem_layout.pitch;
    l.message_ints = m_mem_layout.message_ints;
    l.per_rank = m_ring.per_rank;
    l.per_node = m_ring.per_node;
    l.per_expert = m_ring.per_expert;
    l.in_rank = m_ring.in_rank;
    l.barrier = m_ring.barrier;
    l.leg_counters = m_ring.leg_counters;
    l.leg_done = m_ring.leg_done;
    l.total = m_ring.total;
    m_mem_layout = l;
    m_exchange_signals = m_ring.shape.num_signals();
  }
  m_leg_overlap = o.overlap_network_leg;
  const BufferOptions forward = forwarding_options(o, m_ranks);

  NodeBootstrap node(bootstrap, m_per_node);
  m_local = std::make_unique<BufferImpl>();
  EPKIT_TRY(m_local->init(node, forward, m_node * m_per_node));
  m_local->m_notify_apart = true;
  if (o.network_leg == BufferOptions::NetworkLeg::nccl_host) {
    auto net = make_nccl_network(bootstrap, m_per_node, o.timeout_s);
    if (!net) return net.error();
    m_net = std::move(*net);
  }

  auto mem = DeviceMemory::allocate(m_mem_layout.total);
  if (!mem) return mem.error();
  m_mem = std::move(*mem);
  if (m_rings) EPKIT_TRY(init_rings());
  if (o.network_leg != BufferOptions::NetworkLeg::nccl_host) EPKIT_TRY(init_leg(bootstrap));
  const std::size_t message_bytes =
      static_cast<std::size_t>(m_nodes) * static_cast<std::size_t>(m_mem_layout.message_ints) * 4;
  auto received = MappedMemory::allocate(message_bytes);
  if (!received) return received.error();
  m_recv_messages = std::move(*received);
  auto sent = MappedMemory::allocate(message_bytes);
  if (!sent) return sent.error();
  m_sent_messages = std::move(*sent);
  if (cudaError_t rc = cudaEventCreateWithFlags(&m_net_done, cudaEventDisableTiming);
      rc != cudaSuccess)
    return cuda_error(rc, "cudaEventCreate");
  if (cudaError_t rc = cudaEventCreateWithFlags(&m_pre_net, cudaEventDisableTiming);
      rc != cudaSuccess)
    return cuda_error(rc, "cudaEventCreate");
  return {};
}

Result<void> InternodeBuffer::usable() const {
  if (m_broken || m_local->broken())
    return make_error(ErrorCode::unavailable, "the Buffer failed before and cannot be used");
  return {};
}

std::vector<int> InternodeBuffer::others() const {
  std::vector<int> nodes;
  for (int n = 0; n < m_nodes; ++n)
    if (n != m_node) nodes.push_back(n);
  return nodes;
}

Error InternodeBuffer::network_failure(const std::string& what, const std::vector<int>& nodes) {
  m_broken = true;
  std::vector<int> ranks;
  for (int n : nodes) ranks.push_back(n * m_per_node + m_local_rank);
  if (m_net != nullptr) m_net->abort();
  if (m_leg != nullptr) m_leg->abort();
  // This node's ranks wait for this one in their next barrier: when one rank
  // is to blame, they name it too instead of this (stuck, not dead) rank.
  if (ranks.size() == 1) m_local->blame_peers(ranks.front());
  return make_error(
      ErrorCode::timeout,
      fmt::format("{}: rank {} never answered on the network within {} s (rail {}: the ranks "
                  "with local index {} on every node); it died, hung, or called a different "
                  "operation",
                  what, rank_list(ranks), m_opts.timeout_s, m_local_rank, m_local_rank));
}

Result<void> InternodeBuffer::wait_network(const std::string& what,
                                           const std::function<std::vector<int>()>& culprits) {
  cudaStream_t stream = m_local->comm_stream();
  if (cudaError_t rc = cudaEventRecord(m_net_done, stream); rc != cudaSuccess)
    return m_local->failure(rc, what);
  // On the device-driven leg the kernel's own waits are bounded by the
  // timeout and name the rank; the host waits longer so they answer first.
  // Over NCCL a peer that is connected but silent after the timeout may be
  // alive and stuck behind a dead rank (its NVLink leg waiting on a node
  // peer, bounded at 2 x timeout + 1 s); that wait, or the transport seeing
  // a process go, names the dead rank first. So this wait then blames the
  // peer to this node's ranks (as before), and gives up only past that bound.
  const auto start = std::chrono::steady_clock::now();
  const auto at = [&](double s) {
    return start + std::chrono::milliseconds(static_cast<long long>(s * 1000));
  };
  const double t = m_opts.timeout_s;
  auto deadline = at(on_leg() ? 2 * t + 1 : t);
  bool extended = on_leg();
  for (;;) {
    cudaError_t rc = cudaEventQuery(m_net_done);
    if (rc == cudaSuccess) return {};
    if (rc != cudaErrorNotReady) return m_local->failure(rc, what);
    if (auto healthy = health(); !healthy) {
      // The transport saw a peer go (a closed connection): name the ones we
      // still wait for, as on a timeout.
      m_broken = true;
      Error e = network_failure(what, culprits());
      return make_error(e.code, fmt::format("{} ({})", e.message, healthy.error().message));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      // A rank whose process the leg saw exit is the one to name, whoever
      // this wait was on (alive, it may be stuck behind it).
      if (on_leg()) {
        if (auto gone = m_leg->exited_rank()) {
          m_broken = true;
          m_leg->abort();
          return make_error(ErrorCode::unavailable,
                            fmt::format("{}: rank {} died: its process exited while this rank "
                                        "waited on the network leg",
                                        what, *gone));
        }
      }
      if (extended) return network_failure(what, culprits());
      extended = true;
      deadline = at(3 * t + 2);
      // While this rank's own NVLink leg still runs, its kernels' bound
      // names whom they wait for: nobody on the network is to blame yet.
      if (cudaEventQuery(m_pre_net) != cudaErrorNotReady) {
        if (auto nodes = culprits(); nodes.size() == 1)
          m_local->blame_peers(nodes.front() * m_per_node + m_local_rank);
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

Result<void> InternodeBuffer::health() const {
  if (m_net != nullptr) return m_net->health();
  if (auto fault = m_leg->fault())
    return make_error(ErrorCode::unavailable, fmt::format("the network leg gave up on rank {}: {}",
                                                          fault->rank, fault->reason));
  std::lock_guard lock(m_leg_error_mutex);
  if (!m_leg_error.empty())
    return make_error(ErrorCode::unavailable,
                      fmt::format("the network leg's progress stopped: {}", m_leg_error));
  return {};
}

Result<void> InternodeBuffer::post(const std::string& what, std::span<const Transfer> sends,
                                   std::span<const Transfer> receives,
                                   const std::function<std::vector<int>()>& culprits) {
  // Where this rank's own work before the leg (its NVLink leg) ends: a wait
  // that expires before it does is stuck here, not on the network.
  if (cudaError_t rc = cudaEventRecord(m_pre_net, m_local->comm_stream()); rc != cudaSuccess)
    return m_local->failure(rc, what);
  auto posted = m_net->exchange(sends, receives, m_local->comm_stream());
  if (posted) return {};
  Error e = network_failure(what, culprits());
  return make_error(e.code, fmt::format("{} ({})", e.message, posted.error().message));
}

Result<void> InternodeBuffer::wait_messages(std::int32_t sequence) {
  const auto* received = static_cast<const volatile std::int32_t*>(m_recv_messages.host());
  const int ints = m_mem_layout.message_ints;
  // A message is written by the receive as it lands, so the senders of the
  // messages that never came are exactly the ones to name.
  return wait_network("dispatch (count messages)", [&] {
    std::vector<int> nodes;
    for (int n = 0; n < m_nodes; ++n) {
      const volatile std::int32_t* msg = received + static_cast<std::int64_t>(n) * ints;
      if (n != m_node && !(msg[0] == sequence && msg[ints - 1] == sequence)) nodes.push_back(n);
    }
    return nodes;
  });
}

Result<Layout> InternodeBuffer::layout(const TensorView& topk, int num_experts,
                                       const StreamOrder& order, const LayoutOutputs& into) {
  EPKIT_TRY(usable());
  auto params = layout_params(topk, num_experts, m_ranks, m_opts.max_tokens);
  if (!params) return params.error();
  EPKIT_TRY(check_layout_outputs(into, topk, m_ranks, num_experts, m_nodes));
  EPKIT_TRY(m_local->enter(order));
  k::LayoutParams p = *params;
  p.ranks_per_node = m_per_node;
  auto* per_rank = output_or(into.num_tokens_per_rank,
                             reinterpret_cast<std::int32_t*>(region(m_mem_layout.per_rank)));
  auto* per_node = output_or(into.num_tokens_per_rdma_rank,
                             reinterpret_cast<std::int32_t*>(region(m_mem_layout.per_node)));
  auto* per_expert = output_or(into.num_tokens_per_expert,
                               reinterpret_cast<std::int32_t*>(region(m_mem_layout.per_expert)));
  auto* in_rank =
      output_or(into.is_token_in_rank, reinterpret_cast<bool*>(region(m_mem_layout.in_rank)));
  p.num_tokens_per_rank = per_rank;
  p.num_tokens_per_node = per_node;
  p.num_tokens_per_expert = per_expert;
  p.is_token_in_rank = in_rank;
  p.topk_copy = into.topk_idx_copy.data;
  p.mailbox = m_local->m_mailbox_dev;
  if (cudaError_t rc = k::launch_layout(p, m_local->comm_stream()); rc != cudaSuccess)
    return m_local->failure(rc, "layout");
  auto event = m_local->leave(order);
  if (!event) return event.error();
  Layout out;
  out.num_tokens_per_rank = TensorView::vector(per_rank, DType::int32, m_ranks);
  out.num_tokens_per_rdma_rank = TensorView::vector(per_node, DType::int32, m_nodes);
  out.num_tokens_per_expert = TensorView::vector(per_expert, DType::int32, num_experts);
  out.is_token_in_rank = TensorView::matrix(in_rank, DType::boolean, topk.rows(), m_ranks);
  out.event = std::move(*event);
  return out;
}

Result<void> InternodeBuffer::barrier() {
  EPKIT_TRY(usable());
  EPKIT_TRY(m_local->barrier());
  // One int to and from every node on the rail; the node barriers on both
  // sides make it a barrier over every rank.
  if (on_leg()) {
    // Signals only: every node's tail reaching this barrier's number.
    EPKIT_TRY(leg_exchange(leg_barrier, "barrier", LegPuts{}, 1));
    EPKIT_TRY(wait_network("barrier", [&] { return others(); }));
    return m_local->barrier();
  }
  auto* slots = reinterpret_cast<std::int32_t*>(region(m_mem_layout.barrier));
  std::vector<Transfer> sends, receives;
  for (int n = 0; n < m_nodes; ++n) {
    sends.push_back({n, slots + m_node, sizeof(std::int32_t)});
    receives.push_back({n, slots + n, sizeof(std::int32_t)});
  }
  EPKIT_TRY(post("barrier", sends, receives, [&] { return others(); }));
  EPKIT_TRY(wait_network("barrier", [&] { return others(); }));
  return m_local->barrier();
}

Result<std::unique_ptr<Buffer>> make_internode_buffer(Bootstrap& bootstrap,
                                                      const BufferOptions& options) {
  auto buffer = std::make_unique<InternodeBuffer>();
  EPKIT_TRY(buffer->init(bootstrap, options));
  return std::unique_ptr<Buffer>(std::move(buffer));
}

std::size_t emulated_mapping_bytes(const BufferOptions& options, int num_ranks) {
  if (!options.internode_rings || options.network_leg != BufferOptions::NetworkLeg::emulated_nic)
    return 0;
  auto rings = ring_memory(options, num_ranks);
  if (!rings) return 0;
  // The emulated NIC maps every other rank's window through CUDA IPC.
  // Measured on the H200 under MPS (docs/ep-internode.md, "Memory"): a
  // Buffer took 1/512 of the window more per other rank (8 bytes a 4 KiB
  // page, as page tables would), at 2 to 16 ranks and windows of 118 to
  // 296 MB.
  constexpr std::size_t small_page = 4096, entry = 8;
  return static_cast<std::size_t>(std::max(num_ranks - 1, 0)) *
         ((rings->total + small_page - 1) / small_page) * entry;
}

std::size_t internode_bytes(const BufferOptions& options, int num_ranks) {
  const std::size_t node =
      heap_layout(forwarding_options(options, num_ranks), std::max(options.ranks_per_node, 1))
          .total;
  if (options.internode_rings) {
    // What the GPU gives up, not only what the regions hold: cudaMalloc
    // hands out 2 MiB pages, so the node heap and the rings' memory each
    // round up to whole pages, and the small allocations (the node Buffer's
    // counters, the leg's signals and peer tables) take one more page. On
    // the H200 the regions alone were 4.0-4.7 % under what a Buffer took.
    constexpr std::size_t page = std::size_t{2} << 20;
    const auto pages = [&](std::size_t bytes) { return (bytes + page - 1) / page * page; };
    auto rings = ring_memory(options, num_ranks);
    return pages(node) + pages(rings ? rings->total : 0) + page +
           emulated_mapping_bytes(options, num_ranks);
  }
  return node + internode_layout(options, num_ranks).total;
}

}  // namespace epkit::ep
