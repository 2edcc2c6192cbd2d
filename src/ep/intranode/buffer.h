// The EP engine's intranode Buffer, shared by its source files: buffer.cc (creation,
// streams, barriers, failures), buffer_dispatch.cc (layout and dispatch) and
// buffer_combine.cc. Internal: users see include/epkit/ep.h.
#pragma once

#include <epkit/ep.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ep/core/buffer_parts.h"
#include "ep/core/device_memory.h"
#include "ep/intranode/kernels.h"

namespace epkit::ep {
namespace kernels {
// The low-latency mode's (ep/low_latency/kernels.h): its launchers are members
// of this Buffer, defined in that folder, which includes this header.
struct LowLatencyRegion;
struct LowLatencyCommon;
}  // namespace kernels
namespace k = kernels;

/// Where each region sits in a rank's heap; the same on every rank.
struct HeapLayout {
  std::size_t rows = 0;  // receive rows: ranks * max_tokens
  std::size_t row_bytes = 0;
  std::size_t num_scales = 0;
  std::size_t recv_x = 0, recv_scales = 0, recv_topk = 0, recv_weights = 0, recv_src = 0;
  std::size_t stage_x = 0, stage_w = 0;
  std::size_t low_latency = 0;  // the low-latency region (BufferOptions::low_latency_bytes)
  std::size_t core = 0;         // bytes before the arena: what num_bytes bounds
  std::size_t arena = 0;        // the output arena (BufferOptions::output_arena_bytes)
  std::size_t arena_bytes = 0;
  std::size_t total = 0;
};

HeapLayout heap_layout(const BufferOptions& o, int ranks);

class BufferImpl final : public Buffer {
  friend class InternodeBuffer;  // runs its stream, mailbox and ordering

 public:
  ~BufferImpl() override;

  int rank() const override { return m_rank; }
  int num_ranks() const override { return m_ranks; }
  cudaStream_t comm_stream() const override { return m_stream; }
  Result<Layout> layout(const TensorView& topk_idx, int num_experts, const StreamOrder& order,
                        const LayoutOutputs& into = {}) override;
  Result<DispatchResult> dispatch(const DispatchArgs& args) override;
  Result<CombineResult> combine(const CombineArgs& args) override;
  Result<TensorView> combine_input(std::int64_t rows, std::int64_t hidden) override;
  Result<TensorView> combine_weights_input(std::int64_t rows, std::int64_t topk) override;
  Region output_arena() const override;
  Result<void> barrier() override;
  Result<void> synchronize() override;
  Result<LowLatencyDispatchResult> low_latency_dispatch(
      const LowLatencyDispatchArgs& args) override;
  Result<LowLatencyCombineResult> low_latency_combine(const LowLatencyCombineArgs& args) override;
  Result<TensorView> get_next_low_latency_combine_buffer(const LowLatencyHandle& handle) override;
  Result<void> clean_low_latency_buffer(int num_max_dispatch_tokens_per_rank, int hidden,
                                        int num_experts) override;

  /// rank_base: the global rank of this node's first rank (internode), so
  /// that errors name global ranks.
  Result<void> init(Bootstrap& bootstrap, const BufferOptions& options, int rank_base = 0);

  /// Internode forwarding (see NotifyParams' segments): a dispatch whose
  /// tokens are rows received from several nodes. The counts come per
  /// segment instead of args.num_tokens_per_rank/expert.
  struct Segments {
    int count = 1;
    int begin[k::k_max_nodes + 1] = {};
    const std::int32_t* tokens_per_rank = nullptr;  // [count][rank_stride]
    std::int64_t rank_stride = 0;
    const std::int32_t* tokens_per_expert = nullptr;  // [count][expert_stride]
    std::int64_t expert_stride = 0;
    int num_experts = 0;                      // experts of this node's ranks
    std::int32_t* recv_gbl_prefix = nullptr;  // out [count * ranks]
    /// Optional, on the device: [count + 1] bounds instead of `begin` (the
    /// device-driven leg's sizes never reach the host); args.x's rows are
    /// then a bound, the rows past begin_device[count] go nowhere.
    const std::int32_t* begin_device = nullptr;
  };
  Result<DispatchResult> dispatch_segments(const DispatchArgs& args, const Segments* segments);
  /// Internode forwarding overlapping the network leg: a cached dispatch
  /// whose rows are still landing (`arrival`, kernels.h LegChunks), and a
  /// combine that counts the rows it writes per chunk (`departure`).
  Result<DispatchResult> dispatch_arriving(const DispatchArgs& args, const k::LegChunks& arrival);
  Result<CombineResult> combine_departing(const CombineArgs& args, const k::LegChunks* departure);
  /// Writes `global_rank + 1` into every peer's Meta.blame (see there).
  void blame_peers(int global_rank);
  bool broken() const { return m_broken; }
  std::uint16_t* combined_x() const { return m_combined_x; }
  float* combined_weights() const { return m_combined_w; }

 private:
  k::SyncParams sync() const;
  k::Meta* meta(int r) const { return reinterpret_cast<k::Meta*>(m_peers[r]); }
  Result<void> enter(const StreamOrder& order);
  Result<Event> leave(const StreamOrder& order);
  Error failure(cudaError_t rc, const std::string& what);
  Result<void> wait_counts(std::uint64_t seq);
  Result<DispatchResult> dispatch_cached(const DispatchArgs& args,
                                         const k::LegChunks* arrival = nullptr);
  /// What a dispatch and a cached dispatch pass alike: x, scales, rows,
  /// every rank's receive regions, the config.
  k::DispatchParams dispatch_params(const DispatchArgs& args, const std::int32_t* send_row,
                                    const std::int32_t* prefix) const;
  /// Asks args.into for the results' memory (rows received) and points the
  /// kernel's published offsets at what lies in the arena; returns the
  /// DispatchOutput bits it will write. `cached`: x, scales and source index
  /// only.
  unsigned place_outputs(const DispatchArgs& args, std::int64_t rows, bool cached,
                         k::DispatchParams& dp, DispatchOutputs& into) const;

  // Low-latency mode (ep/low_latency/buffer_low_latency*.cc).
  /// The region for a call's shape, or why the call cannot have it.
  Result<k::LowLatencyRegion> low_latency_region(const char* op, int max_tokens, int hidden,
                                                 int experts) const;
  k::LowLatencyCommon low_latency_common(const k::LowLatencyRegion& region, int buffer,
                                         int phases) const;
  /// One half of an operation: ordered after `order`, launched, and the
  /// caller's stream made to wait (unless order.async).
  Result<Event> low_latency_launch(const StreamOrder& order, const char* what,
                                   const std::function<cudaError_t()>& launch);
  /// The hook of a send: the receive half on the caller's stream of `order`.
  LowLatencyHook low_latency_hook(const StreamOrder& order, const char* what,
                                  std::function<cudaError_t()> launch);
  /// The ranks a low-latency operation spans: this node's, or every node's
  /// when an internode Buffer set m_low_latency_world.
  int low_latency_ranks() const { return m_low_latency_ranks > 0 ? m_low_latency_ranks : m_ranks; }
  /// Set by an internode Buffer: its low-latency operations span all its
  /// ranks (global numbers in the kernels and their errors), this node's
  /// over NVLink, the others' through its network leg; the function fills
  /// a kernel's view of them (LowLatencyCommon's ranks, bases and leg).
  int m_low_latency_ranks = 0;
  std::function<void(k::LowLatencyCommon&)> m_low_latency_world;

  BufferOptions m_opts;
  HeapLayout m_heap;
  int m_rank = 0;
  int m_ranks = 1;
  int m_rank_base = 0;
  int m_device = 0;
  std::uint8_t* m_peers[k::k_max_ranks] = {};  // m_peers[m_rank] is our own heap
  std::shared_ptr<Stream> m_stream_owner = std::make_shared<Stream>();
  cudaStream_t m_stream = nullptr;
  cudaEvent_t m_entry_event = nullptr;
  cudaEvent_t m_exit_event = nullptr;  // leave()'s when the caller wants no event
  k::Mailbox* m_mailbox = nullptr;     // host pointer
  k::Mailbox* m_mailbox_dev = nullptr;
  DeviceMemory m_local;  // counters and layout/combine outputs
  std::int32_t* m_grid_counter = nullptr;
  std::int32_t* m_offsets_scratch = nullptr;
  std::int32_t* m_tokens_per_rank = nullptr;
  std::int32_t* m_tokens_per_expert = nullptr;
  bool* m_token_in_rank = nullptr;
  std::int32_t* m_recv_per_expert = nullptr;
  std::uint16_t* m_combined_x = nullptr;
  float* m_combined_w = nullptr;
  std::uint64_t m_count_seq = 0;     // numbers the counts the mailbox carries
  std::uint64_t* m_epoch = nullptr;  // device (see SyncParams::epoch)
  int m_low_latency_next = 0;        // the buffer the next low-latency operation uses (0 or 1)
  std::uint64_t m_low_latency_issued = 0;  // low-latency operations issued (a hook's check)
  bool m_broken = false;
  /// Cached dispatch and combine run their entry barrier as a notify_peers
  /// kernel of its own instead of inside the data kernel. An internode
  /// Buffer sets it: a launch more costs nothing beside its network leg, and
  /// the node's skew then shows apart from the data movement (DeepEP's
  /// notify + dispatch times).
  bool m_notify_apart = false;
  /// An internode Buffer's account of its network leg, added to a network
  /// timeout's error (the transport's own fault, its progress thread).
  std::function<std::string()> m_network_note;
  /// A peer whose process exited, as the internode Buffer's network leg
  /// sees it now (none where nothing watches processes).
  std::function<std::optional<int>()> m_exited_peer;
  /// Words for a bad count message on the leg (k_bad_leg_message: the
  /// sender's global rank, the packed fault), set by the internode Buffer.
  std::function<std::string(long long, long long)> m_leg_message_text;
};

}  // namespace epkit::ep
