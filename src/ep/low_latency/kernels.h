// The low-latency mode's kernels and what they share with the host (plain
// C++17: included by the launchers and the .cu files): where each array of a
// buffer sits, and the kernel parameters (the region's header is in
// ep/core/kernels.h). The protocol is in docs/ep-engine.md, "Low-latency mode".
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ep/core/kernels.h"
#include "ep/network_leg/leg.h"

namespace epkit::ep::kernels {

/// The largest top-k: combine_rows has this many rows per token.
constexpr int k_low_latency_max_topk = 16;
/// Threads of every low-latency block (one block per SM).
constexpr int k_low_latency_threads = 1024;

/// Byte offsets of one buffer's arrays from the region's start (the same on
/// every rank). See docs/ep-engine.md for who writes what.
struct LowLatencyBufferOffsets {
  std::int64_t counts = 0;        // int32 [ranks][experts]
  std::int64_t recv_x = 0;        // [L][RM] rows of 2 * hidden bytes (FP8: hidden-byte rows)
  std::int64_t recv_scales = 0;   // fp32 [L][S][RM] or int32 [L][S / 4][RM]
  std::int64_t scale_rows = 0;    // fp32 [L][RM][S]
  std::int64_t src_info = 0;      // int32 [L][RM]
  std::int64_t src_slot = 0;      // int32 [L][RM]: source rank << 8 | k
  std::int64_t layout_range = 0;  // int64 [L][ranks]
  std::int64_t recv_count = 0;    // int32 [L]
  std::int64_t combine_in = 0;    // bf16 [L][RM][hidden]
  std::int64_t combine_rows = 0;  // bf16 [max tokens][k_low_latency_max_topk][hidden]
  std::int64_t combined = 0;      // bf16 [max tokens][hidden]
  /// [max tokens] rows of cast_pitch bytes: FP8 bytes + S fp32, or (a
  /// send across nodes) the BF16 row, so that a put reads a registered window.
  std::int64_t cast = 0;
  // A hooked dispatch's send (it never waits on a peer), and every dispatch
  // across nodes: each source writes its rows into its own slice, the
  // receive packs them into recv_x.
  std::int64_t stage = 0;  // [L][ranks][max tokens] rows of 2 * hidden bytes
  /// [ranks][meta_pitch] by source: L u64 words `epoch << 32 | rows`, one
  /// u64 (from another node) the source's running total of rows put to this
  /// rank on this buffer, then int32 [L][max tokens] `token << 8 | k` of the
  /// slice's rows.
  std::int64_t slice_meta = 0;
  /// [ranks][meta_pitch] by destination: the same, built here and put in one
  /// piece to a rank on another node (whose first two words also carry a
  /// combine's count).
  std::int64_t send_meta = 0;
  /// u64 [ranks][2]: from each holder on another node, a combine's `epoch <<
  /// 32 | rows` and its running total of rows put here on this buffer.
  std::int64_t combine_count = 0;
};

/// A shape's region: header, then two buffers.
struct LowLatencyRegion {
  int max_tokens = 0;  // num_max_dispatch_tokens_per_rank
  int hidden = 0;
  int num_ranks = 0;
  int num_experts = 0;
  int local_experts = 0;
  int num_scales = 0;                // hidden / 128
  std::int64_t rows_per_expert = 0;  // ranks * max_tokens
  std::int64_t cast_row_bytes = 0;   // hidden + 4 * num_scales, rounded up to 16
  std::int64_t cast_pitch = 0;       // 2 * hidden: a cast row or a BF16 row
  std::int64_t meta_pitch = 0;       // 8 * (L + 1) + 4 * L * max tokens, rounded up to 16
  LowLatencyBufferOffsets buffer[2];
  std::int64_t total = 0;  // bytes
};

/// Across nodes: the network leg a low-latency operation puts through to
/// ranks of other nodes (docs/ep-engine.md, "Across nodes"). Per (kind,
/// part, buffer, source) one signal of the receiver's: part 0 counts the
/// count puts (one per operation), part 1 the row puts. A receive waits for
/// absolute values, which the sends alone advance: an operation whose
/// receive never runs (a hook refused) leaves no debt to a later one.
struct LowLatencyLeg {
  bool on = false;
  network_leg::DeviceLeg leg;
  network_leg::WindowId window;  // every rank's low-latency region
  std::uint32_t signal_base = 0;
  /// This rank's own running counts (device memory, so a captured operation
  /// replays with new ones), advanced by the last block of every send:
  /// u64 [2 kinds][2 buffers] operations sent (every rank sends each
  /// operation, so also the count puts each source has made to this rank),
  /// then u64 [2 kinds][2 buffers][ranks] rows put to each rank.
  std::uint64_t* sent = nullptr;
};
constexpr int k_low_latency_dispatch_kind = 0;
constexpr int k_low_latency_combine_kind = 1;
/// The index of a signal past signal_base.
constexpr EPKIT_HOST_DEVICE std::uint32_t low_latency_signal(int kind, int part, int buffer,
                                                             int source, int ranks) {
  return static_cast<std::uint32_t>(((kind * 2 + part) * 2 + buffer) * ranks + source);
}
constexpr int k_low_latency_signals_per_rank = 8;
/// LowLatencyLeg::sent: the operations of a kind on a buffer, and the rows
/// to rank r; words in all.
constexpr EPKIT_HOST_DEVICE int low_latency_sent_ops(int kind, int buffer) {
  return kind * 2 + buffer;
}
constexpr EPKIT_HOST_DEVICE int low_latency_sent_rows(int kind, int buffer, int r, int ranks) {
  return 4 + (kind * 2 + buffer) * ranks + r;
}
constexpr EPKIT_HOST_DEVICE int low_latency_sent_words(int ranks) {
  return 4 + 4 * ranks;
}

/// What every low-latency kernel knows about the ranks and its buffer.
struct LowLatencyCommon {
  int phases = 3;  // 1: send, 2: receive, 3: both
  int rank = 0;
  int num_ranks = 1;
  int buffer = 0;  // which of the two buffers this operation uses
  LowLatencyRegion region;
  /// Every rank's region where it is mapped (NVLink); null: a rank on
  /// another node, reached through `net`.
  std::uint8_t* base[k_low_latency_max_ranks] = {};
  std::uint64_t timeout_ns = 0;
  Mailbox* mailbox = nullptr;
  /// int64 [ranks], optional: clock cycles the receive waited per source.
  long long* wait_stats = nullptr;
  LowLatencyLeg net;
};

constexpr int k_low_latency_send = 1;
constexpr int k_low_latency_recv = 2;

struct LowLatencyDispatchParams {
  LowLatencyCommon c;
  const std::uint8_t* x = nullptr;  // BF16 rows
  std::int64_t x_stride = 0;        // bytes between tokens
  const void* topk = nullptr;
  bool topk_int64 = true;
  std::int64_t topk_stride = 0;  // elements between tokens
  int num_tokens = 0;
  int num_topk = 0;
  bool fp8 = false;
  bool round_scale = false;
  bool ue8m0 = false;
  std::int32_t* cumulative_stats = nullptr;  // int32 [local experts], optional
  int num_blocks = 24;
};
/// Dynamic shared memory the dispatch kernel needs for this grid (per-expert
/// counts and the slots of a block's own selections).
std::size_t low_latency_dispatch_smem(int num_experts, int num_tokens, int num_topk,
                                      int num_blocks);
cudaError_t launch_low_latency_dispatch(const LowLatencyDispatchParams& p, cudaStream_t stream);

struct LowLatencyCombineParams {
  LowLatencyCommon c;
  int dispatch_buffer = 0;           // the buffer of the dispatch whose rows come back
  const std::uint8_t* x = nullptr;   // BF16 [L][RM][hidden] (or combine_in with zero copy)
  std::int64_t x_expert_stride = 0;  // bytes
  std::int64_t x_row_stride = 0;     // bytes
  /// x's offset in this rank's region (zero copy), or -1: a row bound for
  /// another node is then copied into combine_in first (a put reads a
  /// registered window).
  std::int64_t x_region_offset = -1;
  const void* topk = nullptr;
  bool topk_int64 = true;
  std::int64_t topk_stride = 0;
  const float* weights = nullptr;
  std::int64_t weights_stride = 0;
  int num_tokens = 0;
  int num_topk = 0;
  std::uint16_t* out = nullptr;  // BF16 [tokens][hidden]
  std::int64_t out_stride = 0;   // elements
  int num_blocks = 24;
};
cudaError_t launch_low_latency_combine(const LowLatencyCombineParams& p, cudaStream_t stream);

/// Barrier, zero the own region's header and both buffers' slice metadata
/// and combine counts (their epochs restart with the header's), barrier
/// (one block).
struct LowLatencyCleanParams {
  SyncParams sync;
  LowLatencyHeader* header = nullptr;                 // own
  std::uint64_t* slice_meta[2] = {nullptr, nullptr};  // own
  std::int64_t slice_meta_words = 0;
  std::uint64_t* combine_count[2] = {nullptr, nullptr};  // own
  int combine_count_words = 0;
};
cudaError_t launch_low_latency_clean(const LowLatencyCleanParams& p, cudaStream_t stream);

}  // namespace epkit::ep::kernels
