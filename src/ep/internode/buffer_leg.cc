// InternodeBuffer on the device-driven network leg (docs/ep-internode.md,
// "The device-driven leg in today's Buffer"): the backend and its progress
// thread, and the exchanges the kernels run.
#include <fmt/format.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <utility>

#include "ep/internode/buffer.h"
#include "ep/internode/checks.h"
#include "ep/low_latency/kernels.h"
#include "ep/network_leg/cuda_ipc_mapper.h"
#include "ep/network_leg/emulated_backend.h"

namespace epkit::ep {

namespace nl = network_leg;

namespace {
constexpr int k_leg_spins_before_yield = 256;
constexpr auto k_leg_busy_for = std::chrono::milliseconds(5);
constexpr int k_leg_nap_us = 20;
}  // namespace

Result<void> InternodeBuffer::init_leg(Bootstrap& bootstrap) {
  nl::EmulatedNicOptions nic;
  nic.pacing.bytes_per_s = m_opts.emulated_nic_gbps * 1e9;
  nic.pacing.latency_ns = static_cast<std::int64_t>(m_opts.emulated_nic_latency_us * 1e3);
  // Per kind: a ready signal per source node, then k_puts per source node.
  // Ring mode's signals (ring_kernels.h, RingShape) first.
  // The low-latency mode's (low_latency/kernels.h, low_latency_signal) last.
  m_low_latency_signals =
      m_exchange_signals +
      static_cast<std::uint32_t>(leg_kinds * m_nodes * (1 + k::LegExchangeParams::k_puts));
  nic.num_signals = m_low_latency_signals +
                    static_cast<std::uint32_t>(k::k_low_latency_signals_per_rank * m_ranks);
  nic.timeout_s = m_opts.timeout_s;
  nic.producer_moves = true;  // no CUDA call on the progress thread (DeviceLeg::grants)
  auto mapper = nl::CudaIpcMapper::create();
  if (!mapper) return mapper.error();
  auto backend = nl::EmulatedBackend::create(nic, std::move(mapper).value());
  if (!backend) return backend.error();
  m_leg = std::move(backend).value();
  // The exchanges' counters start at 0 on every rank.
  static_assert(leg_kinds * k_leg_counter_words <= 4 * 4,
                "internode_layout's leg_counters region holds every kind");
  if (cudaError_t rc = cudaMemset(region(m_mem_layout.leg_counters), 0,
                                  leg_kinds * k_leg_counter_words * sizeof(std::uint64_t));
      rc != cudaSuccess)
    return cuda_error(rc, "cudaMemset of the network leg's counters");
  if (cudaError_t rc = cudaMemset(region(m_mem_layout.leg_done), 0,
                                  static_cast<std::size_t>(m_nodes) * k::k_leg_chunks * 4);
      rc != cudaSuccess)
    return cuda_error(rc, "cudaMemset of the network leg's chunk counts");
  if (cudaError_t rc = cudaStreamCreateWithFlags(&m_leg_stream, cudaStreamNonBlocking);
      rc != cudaSuccess)
    return cuda_error(rc, "cudaStreamCreate for the network leg");
  for (cudaEvent_t* e : {&m_leg_fork, &m_leg_join})
    if (cudaError_t rc = cudaEventCreateWithFlags(e, cudaEventDisableTiming); rc != cudaSuccess)
      return cuda_error(rc, "cudaEventCreate for the network leg");
  // Window 0: this Buffer's own regions; window 1: the forwarding Buffer's
  // local memory (its combine's partial sums are put from there).
  auto internode = m_leg->register_window(m_mem.get(), m_mem.size());
  if (!internode) return internode.error();
  auto local = m_leg->register_window(m_local->m_local.get(), m_local->m_local.size());
  if (!local) return local.error();
  if (internode->value != window_internode || local->value != window_node_local)
    return make_error(ErrorCode::internal, "the network leg numbered the Buffer's windows apart");
  EPKIT_TRY(init_low_latency());
  // The memsets above (and the NIC's zeroed signals) are on the legacy
  // stream, which the kernels' non-blocking streams do not wait for: every
  // zeroed word lands before a peer learns its address and adds to it.
  if (cudaError_t rc = cudaDeviceSynchronize(); rc != cudaSuccess)
    return cuda_error(rc, "cudaDeviceSynchronize after zeroing the network leg's words");
  EPKIT_TRY(m_leg->exchange(bootstrap));
  int device = 0;
  if (cudaError_t rc = cudaGetDevice(&device); rc != cudaSuccess)
    return cuda_error(rc, "cudaGetDevice");
  m_leg_thread = std::thread([this, device] {
    // The rank's NIC: until the Buffer goes or the backend fails (its
    // fault() then names the cause, and the kernels' waits expire). Its
    // copies run on this rank's GPU, which a new thread must be told.
    if (cudaError_t rc = cudaSetDevice(device); rc != cudaSuccess) {
      set_leg_error(fmt::format("cudaSetDevice({}): {}", device, cudaGetErrorString(rc)));
      return;
    }
    // Spins while puts flow (the pacing model's latency is microseconds);
    // idle, it yields and, once nothing moved for a while, naps, so ranks
    // that share a host's cores (8 a node, nodes faked) leave them to the
    // callers. The while is time, not steps: a kernel posts its puts some
    // hundred microseconds apart, and a nap between them (a sleep is 50 us
    // or more, the kernel's timer slack) would add to every put's latency;
    // a put after a long idle stretch waits at most one nap.
    int idle = 0;
    auto moved_at = std::chrono::steady_clock::now();
    while (!m_leg_stop.load(std::memory_order_acquire)) {
      if (auto step = m_leg->progress(); !step.ok()) {
        set_leg_error(step.error().message);
        return;
      }
      if (m_leg->moved_last_step()) {
        idle = 0;
        moved_at = std::chrono::steady_clock::now();
        continue;
      }
      if (++idle <= k_leg_spins_before_yield) continue;
      if (std::chrono::steady_clock::now() - moved_at > k_leg_busy_for)
        std::this_thread::sleep_for(std::chrono::microseconds(k_leg_nap_us));
      else
        std::this_thread::yield();
    }
  });
  m_local->m_network_note = [this] { return leg_note(); };
  m_local->m_exited_peer = [this] { return m_leg->exited_rank_now(); };
  m_local->m_leg_message_text = [](long long sender, long long value) {
    return leg_message_error(k::unpack_leg_fault(value), sender);
  };
  return {};
}

Result<void> InternodeBuffer::set_emulated_nic_gbps(double gbps) {
  auto* nic = dynamic_cast<nl::EmulatedBackend*>(m_leg.get());
  if (nic == nullptr)
    return invalid("set_emulated_nic_gbps: this Buffer's network leg is not the emulated NIC");
  return nic->set_bytes_per_s(gbps * 1e9);
}

Result<InternodeBuffer::NicIdle> InternodeBuffer::take_emulated_nic_idle() {
  auto* nic = dynamic_cast<nl::EmulatedBackend*>(m_leg.get());
  if (nic == nullptr)
    return invalid("take_emulated_nic_idle: this Buffer's network leg is not the emulated NIC");
  return nic->take_idle();
}

void InternodeBuffer::set_leg_error(std::string error) {
  std::lock_guard lock(m_leg_error_mutex);
  if (m_leg_error.empty()) m_leg_error = std::move(error);
}

std::string InternodeBuffer::leg_note() const {
  std::string note = fmt::format("the leg: {}", m_leg->describe());
  if (auto fault = m_leg->fault())
    note += fmt::format(", its fault: rank {}: {}", fault->rank, fault->reason);
  std::lock_guard lock(m_leg_error_mutex);
  if (!m_leg_error.empty()) note += fmt::format(", its progress stopped: {}", m_leg_error);
  return note;
}

void InternodeBuffer::stop_leg() {
  m_leg_stop.store(true, std::memory_order_release);
  if (m_leg_thread.joinable()) m_leg_thread.join();
}

std::uint64_t InternodeBuffer::node_local_offset(const void* p) const {
  return static_cast<std::uint64_t>(static_cast<const std::uint8_t*>(p) -
                                    static_cast<const std::uint8_t*>(m_local->m_local.get()));
}

Result<void> InternodeBuffer::leg_exchange(LegKind kind, const char* what, const LegPuts& puts,
                                           int num_puts, std::int32_t* messages,
                                           const k::MessageFormat* format, bool side) {
  if (auto fault = m_leg->fault()) {
    m_broken = true;
    return make_error(ErrorCode::unavailable,
                      fmt::format("{}: the network leg failed before (rank {}: {})", what,
                                  fault->rank, fault->reason));
  }
  k::LegExchangeParams p;
  p.leg = m_leg->device_leg();
  p.num_nodes = m_nodes;
  p.node = m_node;
  p.ranks_per_node = m_per_node;
  p.local_rank = m_local_rank;
  p.num_puts = num_puts;
  for (int i = 0; i < num_puts; ++i) p.puts[i] = puts[static_cast<std::size_t>(i)];
  const std::uint32_t base = leg_signal_base(kind);
  p.ready_signal = base;
  p.tail_signal = base + static_cast<std::uint32_t>(m_nodes);
  p.counters = leg_counter(kind);
  p.timeout_ns = static_cast<std::int64_t>(m_opts.timeout_s * 1e9);
  p.mailbox = m_local->m_mailbox_dev;
  if (messages != nullptr && format != nullptr) {
    p.messages = messages;
    p.message_ints = m_mem_layout.message_ints;
    p.message_format = *format;
  }
  if (cudaError_t rc = k::launch_leg_exchange(p, side ? m_leg_stream : m_local->comm_stream());
      rc != cudaSuccess)
    return m_local->failure(rc, what);
  return {};
}

Result<void> InternodeBuffer::begin_side(const char* what) {
  cudaError_t rc = cudaEventRecord(m_leg_fork, m_local->comm_stream());
  if (rc == cudaSuccess) rc = cudaStreamWaitEvent(m_leg_stream, m_leg_fork, 0);
  if (rc != cudaSuccess) return m_local->failure(rc, fmt::format("{} (the leg's stream)", what));
  return {};
}

Result<void> InternodeBuffer::end_side(const char* what) {
  cudaError_t rc = cudaEventRecord(m_leg_join, m_leg_stream);
  if (rc == cudaSuccess) rc = cudaStreamWaitEvent(m_local->comm_stream(), m_leg_join, 0);
  if (rc != cudaSuccess) return m_local->failure(rc, fmt::format("{} (the leg's stream)", what));
  return {};
}

Result<void> InternodeBuffer::time_leg_phases(bool on) {
  if (on && m_phase[0] == nullptr)
    for (cudaEvent_t& e : m_phase)
      if (cudaError_t rc = cudaEventCreate(&e); rc != cudaSuccess)
        return cuda_error(rc, "cudaEventCreate for the leg's phases");
  m_time_phases = on;
  return {};
}

Result<InternodeBuffer::LegPhases> InternodeBuffer::last_leg_phases() const {
  if (m_phase[0] == nullptr) return invalid("the leg's phases are not timed (time_leg_phases)");
  if (cudaError_t rc = cudaEventSynchronize(m_phase[3]); rc != cudaSuccess)
    return cuda_error(rc, "waiting for the timed call");
  float t[3] = {};
  for (std::size_t i = 0; i < 3; ++i)
    if (cudaError_t rc = cudaEventElapsedTime(&t[i], m_phase[i], m_phase[i + 1]); rc != cudaSuccess)
      return cuda_error(rc, "the leg's phase times");
  return LegPhases{t[1], t[0] + t[2]};
}

k::LegChunks InternodeBuffer::leg_chunks(const InternodeHandle& h) const {
  k::LegChunks c;
  c.segment_begin = h.leg_counts->segment_begin;
  c.num_segments = m_nodes;
  c.own = m_node;
  c.chunks = k::k_leg_chunks;
  c.timeout_ns = static_cast<std::int64_t>(m_opts.timeout_s * 1e9);
  c.exited = m_leg->device_leg().exited;
  c.ranks_per_node = m_per_node;
  c.local_rank = m_local_rank;
  return c;
}

}  // namespace epkit::ep
