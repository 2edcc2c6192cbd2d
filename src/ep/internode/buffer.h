// The internode Buffer: nodes x ranks_per_node ranks. It owns an intranode
// Buffer over its node's ranks (the NVLink legs, with segmented counts) and
// a Network over its rail (the ranks with its local index on every node).
// Files: buffer.cc (creation, layout, barrier, the bounded host
// waits), buffer_dispatch.cc, buffer_combine.cc. Design:
// docs/ep-internode.md. Internal: users see include/epkit/ep.h.
#pragma once

#include <epkit/ep.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "ep/core/device_memory.h"
#include "ep/internode/kernels.h"
#include "ep/internode/leg_counts.h"
#include "ep/internode/network.h"
#include "ep/internode/ring_memory.h"
#include "ep/intranode/buffer.h"
#include "ep/network_leg/emulated_pacing.h"
#include "ep/network_leg/leg.h"

namespace epkit::ep {

/// Where each region sits in an internode rank's own memory.
struct InternodeLayout {
  std::size_t pitch = 0;  // the widest packed row (BF16 x, int64 top-k, weights)
  int message_ints = 0;
  std::size_t buckets = 0, rows = 0, partial_x = 0, partial_w = 0, out_x = 0, out_w = 0;
  std::size_t per_rank = 0, per_node = 0, per_expert = 0, in_rank = 0, send_messages = 0;
  std::size_t recv_messages = 0;  // where the device-driven leg puts them
  std::size_t leg_counters = 0;   // the leg's exchanges so far, per kind
  std::size_t leg_done = 0;  // rows written per (node, chunk): a combine's, an overlapped pack's
  std::size_t barrier = 0;
  std::size_t total = 0;
};
InternodeLayout internode_layout(const BufferOptions& options, int num_ranks);
/// Buffer::create's internode Buffer, and Buffer::bytes_needed's answer for it.
Result<std::unique_ptr<Buffer>> make_internode_buffer(Bootstrap& bootstrap,
                                                      const BufferOptions& options);
std::size_t internode_bytes(const BufferOptions& options, int num_ranks);
/// Of internode_bytes in ring mode, what the emulated NIC's mappings of the
/// other ranks' windows cost (0 on another leg): a real NIC maps none, so
/// this part grows with the world only on the emulator.
std::size_t emulated_mapping_bytes(const BufferOptions& options, int num_ranks);
/// The options of the node's intranode Buffer: it forwards up to nodes x
/// max_tokens rows, and waits longer than the network leg (see blame).
BufferOptions forwarding_options(const BufferOptions& options, int num_ranks);
/// The packed row for a dispatch of this x (and top-k, weights).
k::RowFormat row_format(DType x_dtype, int hidden, int topk_size, int num_topk, bool with_weights,
                        int ranks_per_node);

/// Pinned, device-mapped host memory (cudaHostAlloc), freed on destruction.
class MappedMemory {
 public:
  MappedMemory() = default;
  static Result<MappedMemory> allocate(std::size_t bytes);
  MappedMemory(MappedMemory&& other) noexcept;
  MappedMemory& operator=(MappedMemory&& other) noexcept;
  MappedMemory(const MappedMemory&) = delete;
  MappedMemory& operator=(const MappedMemory&) = delete;
  ~MappedMemory();
  void* host() const { return m_host; }
  void* device() const { return m_device; }

 private:
  void* m_host = nullptr;
  void* m_device = nullptr;
};

/// What a cached dispatch and a combine need from an internode dispatch.
class InternodeHandle final : public DispatchHandle {
 public:
  InternodeHandle(void* memory, std::shared_ptr<Stream> stream)
      : m_memory(memory), m_stream(std::move(stream)) {}
  ~InternodeHandle() override {
    if (m_memory != nullptr) m_stream->free_later(m_memory);
    if (m_outputs != nullptr) m_stream->free_later(m_outputs);
  }
  InternodeHandle(const InternodeHandle&) = delete;
  InternodeHandle& operator=(const InternodeHandle&) = delete;

  std::shared_ptr<const DispatchHandle> forward;  // the node's intranode handle
  const std::int32_t* node_send_row = nullptr;    // [tokens, nodes]: row in each bucket
  // The NCCL leg's counts, read on the host:
  std::vector<int> rows_to;        // [nodes]: rows of this rank's bucket for each
  std::vector<int> rows_from;      // [nodes]: rows received from each
  std::vector<int> segment_begin;  // [nodes + 1]: prefix of rows_from
  /// The device-driven leg: the same counts, checked and kept on the device
  /// only (the host never waits for them), in the handle's memory.
  k::LegCounts* leg_counts = nullptr;

  /// Ring mode (buffer_rings.cc): the routes on the device (in this
  /// handle's memory, or a parent's for a cached dispatch's handle), the
  /// rows of this call's outputs, which the handle owns (`outputs`), and the
  /// experts per rank the routes were counted for.
  bool rings = false;
  k::RingRoutes routes;
  int rows = 0;
  int experts_per_rank = 0;
  std::shared_ptr<const InternodeHandle> parent;
  void set_outputs(void* outputs) { m_outputs = outputs; }

  /// The other nodes this rank trades rows with (for naming who never
  /// answered when a transfer of this dispatch's rows hangs).
  std::vector<int> peers_with_rows(int self) const {
    std::vector<int> nodes;
    for (std::size_t n = 0; n < rows_to.size(); ++n)
      if (static_cast<int>(n) != self && (rows_from[n] > 0 || rows_to[n] > 0))
        nodes.push_back(static_cast<int>(n));
    return nodes;
  }

 private:
  void* m_memory;
  void* m_outputs = nullptr;
  std::shared_ptr<Stream> m_stream;
};

class InternodeBuffer final : public Buffer {
 public:
  ~InternodeBuffer() override;

  int rank() const override { return m_rank; }
  int num_ranks() const override { return m_ranks; }
  int num_nodes() const override { return m_nodes; }
  std::string network() const override {
    return m_net != nullptr ? m_net->describe() : m_leg->describe();
  }
  cudaStream_t comm_stream() const override { return m_local->comm_stream(); }
  Result<Layout> layout(const TensorView& topk_idx, int num_experts, const StreamOrder& order,
                        const LayoutOutputs& into = {}) override;
  Result<DispatchResult> dispatch(const DispatchArgs& args) override;
  Result<CombineResult> combine(const CombineArgs& args) override;
  /// Ring mode keeps no region sized for the received rows: a staging
  /// area grown to the largest asked for (buffer_rings.cc).
  Result<TensorView> combine_input(std::int64_t rows, std::int64_t hidden) override;
  Result<TensorView> combine_weights_input(std::int64_t rows, std::int64_t topk) override;
  Result<void> barrier() override;
  Result<void> synchronize() override { return m_local->synchronize(); }
  // Low-latency mode across nodes (buffer_low_latency.cc): the node's
  // Buffer runs it over every rank, this node's through NVLink and the
  // others' through the device-driven leg.
  Result<LowLatencyDispatchResult> low_latency_dispatch(
      const LowLatencyDispatchArgs& args) override;
  Result<LowLatencyCombineResult> low_latency_combine(const LowLatencyCombineArgs& args) override;
  Result<TensorView> get_next_low_latency_combine_buffer(const LowLatencyHandle& handle) override;
  Result<void> clean_low_latency_buffer(int num_max_dispatch_tokens_per_rank, int hidden,
                                        int num_experts) override;

  Result<void> init(Bootstrap& bootstrap, const BufferOptions& options);
  /// Whether a cached dispatch and a combine on the device-driven leg
  /// overlap it with the NVLink legs (BufferOptions::overlap_network_leg),
  /// or run them one after the other (to time each alone:
  /// tests/gpu/ep_leg_host_time.cc, overlap).
  void set_leg_overlap(bool on) { m_leg_overlap = on; }
  /// With the leg run serially: the last cached dispatch's or combine's
  /// network leg alone and the rest of it (pack, NVLink legs, reduce), from
  /// events around each part. Waits for that call.
  struct LegPhases {
    float network_ms = 0;
    float rest_ms = 0;
  };
  Result<void> time_leg_phases(bool on);
  /// Ring mode, for tests: each later operation's kernel writes every
  /// block's start and end (ns) into `profile` (device, 2 words a block:
  /// 3 blocks a channel, sender, forwarder, receiver); null stops it.
  void set_ring_profile(std::uint64_t* profile) { m_ring_profile = profile; }
  /// The emulated NIC's cap from now on, for tests that time calls at two
  /// caps in one process (every rank must be told, between calls); refused
  /// on another network leg.
  Result<void> set_emulated_nic_gbps(double gbps);
  /// For tests: how the emulated NIC went unused since the last call, the
  /// capacity lost (ns at the cap) and its empty stretches (steady_clock ns).
  using NicIdle = network_leg::EmulatedPacing::Idle;
  Result<NicIdle> take_emulated_nic_idle();
  Result<LegPhases> last_leg_phases() const;

 private:
  /// Waits on the host, bounded by the timeout, for the network leg posted
  /// last (its end is recorded in m_net_done). Stuck: aborts the network,
  /// names the ranks of the nodes `culprits` returns (those it still waits
  /// for) and, when that is one rank, tells this node's ranks to blame it.
  Result<void> wait_network(const std::string& what,
                            const std::function<std::vector<int>()>& culprits);
  /// Posts a network leg; when the transport cannot (a peer never connects
  /// or went away), names the ranks of the nodes `culprits` returns, as
  /// wait_network does.
  Result<void> post(const std::string& what, std::span<const Transfer> sends,
                    std::span<const Transfer> receives,
                    const std::function<std::vector<int>()>& culprits);
  /// Like wait_network, for the count messages: a message that never came
  /// names its sender exactly.
  Result<void> wait_messages(std::int32_t sequence);
  Error network_failure(const std::string& what, const std::vector<int>& nodes);
  /// A failure the transport reported by itself (NCCL's async error, the
  /// leg's fault); success while healthy.
  Result<void> health() const;
  Result<void> usable() const;
  /// The other nodes, in order.
  std::vector<int> others() const;
  Result<DispatchResult> dispatch_cached(const DispatchArgs& args, const InternodeHandle& handle);

  // Ring mode (BufferOptions::internode_rings; buffer_rings.cc): fixed
  // rings instead of buckets sized for the worst case.
  Result<void> init_rings();
  Result<DispatchResult> dispatch_rings(const DispatchArgs& args);
  Result<CombineResult> combine_rings(const CombineArgs& args, const InternodeHandle& handle);
  /// The shared shape with this rank's place in it.
  k::RingShape ring_shape(int experts_per_rank) const;
  /// A bounded host wait for the work queued so far on the Buffer's stream
  /// (its kernels' own waits are bounded and name the rank; this bound is
  /// past theirs).
  Result<void> wait_stream(const char* what);
  /// combine_input's and combine_weights_input's staging in ring mode,
  /// grown (after the Buffer's stream drains) when a larger one is asked.
  Result<void*> ring_stage(DeviceMemory& stage, std::size_t bytes);
  bool m_rings = false;
  RingMemory m_ring;
  DeviceMemory m_stage_x;
  std::uint64_t* m_ring_profile = nullptr;
  DeviceMemory m_stage_w;
  MappedMemory m_ring_totals;  // ring_notify's host_totals
  /// The first signal of the leg exchanges (ring mode's own signals first).
  std::uint32_t m_exchange_signals = 0;

  // The device-driven leg (BufferOptions::network_leg other than nccl_host;
  // buffer_leg.cc). Each kind of exchange has its own ready and tail signals
  // per source node and its own receive region.
  enum LegKind : int { leg_messages, leg_rows, leg_partials, leg_barrier, leg_kinds };
  enum LegWindow : std::uint32_t {
    window_internode = 0,
    window_node_local = 1,
    window_low_latency = 2,  // the node Buffer's low-latency region, when it has one
  };
  /// An exchange's puts, each a rule for every other node (k::LegPut).
  using LegPuts = std::array<k::LegPut, k::LegExchangeParams::k_puts>;
  bool on_leg() const { return m_leg != nullptr; }
  /// Makes the backend, registers this Buffer's memory, trades handles with
  /// every rank (collective) and starts the progress thread.
  Result<void> init_leg(Bootstrap& bootstrap);
  void stop_leg();
  /// In init_leg, before the handles are traded: the low-latency region as
  /// the leg's third window, its signals' consumed values, and the node
  /// Buffer told to span every rank.
  Result<void> init_low_latency();
  /// Why a low-latency call cannot run on this Buffer, if it cannot.
  Result<void> low_latency_usable(const char* op) const;
  std::uint32_t m_low_latency_signals = 0;  // the first of k_low_latency_signals_per_rank x ranks
  DeviceMemory m_low_latency_sent;
  /// The progress thread's first error; the leg's state for an error message.
  void set_leg_error(std::string error);
  std::string leg_note() const;
  /// Launches one exchange of `kind`: the first `num_puts` of `puts` to
  /// every other node, on the Buffer's stream, or on the leg's own stream
  /// when `side` (overlap: begin_side / end_side around it). `messages`:
  /// count messages to complete first (the rows vector).
  Result<void> leg_exchange(LegKind kind, const char* what, const LegPuts& puts, int num_puts,
                            std::int32_t* messages = nullptr,
                            const k::MessageFormat* format = nullptr, bool side = false);
  /// The leg's stream forks from the Buffer's stream here (it waits for
  /// what the Buffer's stream queued so far), and joins it back.
  Result<void> begin_side(const char* what);
  Result<void> end_side(const char* what);
  /// A kind's exchange counters (LegExchangeParams::counters, words 0 and
  /// 1), and two counts kept by the kernels that read a kind's signals
  /// while its exchange may run before or after them: the pack's count of
  /// rows exchanges, which the forwarding reads (PackParams::leg_number),
  /// and the reduce's count of partial-sum exchanges (ReduceParams::number).
  static constexpr int k_leg_counter_words = 4;
  std::uint64_t* leg_counter(LegKind kind) const {
    return reinterpret_cast<std::uint64_t*>(region(m_mem_layout.leg_counters)) +
           k_leg_counter_words * kind;
  }
  std::uint64_t* forward_number() const { return leg_counter(leg_rows) + 2; }
  std::uint64_t* reduce_number() const { return leg_counter(leg_partials) + 2; }
  /// The first signal of a kind's (LegExchangeParams: ready, then puts).
  std::uint32_t leg_signal_base(LegKind kind) const {
    return m_exchange_signals +
           static_cast<std::uint32_t>(kind * m_nodes * (1 + k::LegExchangeParams::k_puts));
  }
  /// The segments and chunks of a dispatch's rows on the leg (k::LegChunks).
  k::LegChunks leg_chunks(const InternodeHandle& handle) const;
  /// Dispatch's count messages over the leg, then the device's checked read
  /// of them into the handle's leg_counts (no host wait).
  Result<void> exchange_messages_on_leg(std::int32_t* sent, const k::MessageFormat& format,
                                        const InternodeHandle& handle);
  /// The buckets to every node (own node: a device copy), rows landing at
  /// the handle's segments: over the leg without a host wait, else NCCL.
  /// `done`: each chunk leaves once the pack counted its rows (LegPut::done).
  Result<void> exchange_buckets(const char* what, const k::RowFormat& format,
                                const InternodeHandle& handle, bool side = false,
                                std::int32_t* done = nullptr);
  /// A put's offset in the node-local window (the forwarding Buffer's own
  /// memory, where its combine leaves the partial sums).
  std::uint64_t node_local_offset(const void* p) const;
  std::int32_t* message(std::int32_t* base, int node) const {
    return base + static_cast<std::int64_t>(node) * m_mem_layout.message_ints;
  }
  std::uint8_t* region(std::size_t offset) const {
    return static_cast<std::uint8_t*>(m_mem.get()) + offset;
  }

  BufferOptions m_opts;
  int m_rank = 0, m_ranks = 0, m_nodes = 0, m_node = 0, m_local_rank = 0, m_per_node = 0;
  std::unique_ptr<BufferImpl> m_local;
  std::unique_ptr<Network> m_net;
  InternodeLayout m_mem_layout;
  DeviceMemory m_mem;
  MappedMemory m_recv_messages;  // [nodes][message ints], received (the own node's copied)
  MappedMemory m_sent_messages;  // [nodes][message ints], a host copy of what was sent
  cudaEvent_t m_net_done = nullptr;
  cudaEvent_t m_pre_net = nullptr;  // recorded before an NCCL leg is posted
  std::int32_t m_sequence = 0;
  bool m_broken = false;
  // Declared after the memory its windows map, so it goes first.
  std::unique_ptr<network_leg::HostBackend> m_leg;
  std::thread m_leg_thread;
  std::atomic<bool> m_leg_stop{false};
  mutable std::mutex m_leg_error_mutex;
  std::string m_leg_error;
  cudaStream_t m_leg_stream = nullptr;
  cudaEvent_t m_leg_fork = nullptr;
  cudaEvent_t m_leg_join = nullptr;
  bool m_leg_overlap = false;            // BufferOptions::overlap_network_leg
  std::array<cudaEvent_t, 4> m_phase{};  // time_leg_phases: start, leg, leg end, end
  bool m_time_phases = false;
  void phase_mark(int i) const {
    if (m_time_phases)
      cudaEventRecord(m_phase[static_cast<std::size_t>(i)], m_local->comm_stream());
  }
};

}  // namespace epkit::ep
