// The intranode (NVLink, normal mode) kernels and their launchers: notify
// (count exchange), dispatch and combine. Plain C++17, included by the
// Buffer's launchers beside them and by the .cu files.
#pragma once

#include "ep/core/kernels.h"

namespace epkit::ep::kernels {

struct NotifyParams {
  SyncParams sync;  // barrier: epoch + 1 (the dispatch kernel after it advances the counter)
  std::uint64_t count_seq = 0;                          // host sequence number for the mailbox
  const std::int32_t* num_tokens_per_rank = nullptr;    // [ranks]
  const std::int32_t* num_tokens_per_expert = nullptr;  // [experts]
  const bool* is_token_in_rank = nullptr;               // [tokens, ranks]
  std::int64_t is_token_in_rank_stride = 0;             // elements between tokens
  int num_tokens = 0;
  int num_experts = 0;
  int expert_alignment = 1;
  int num_worst_tokens = 0;
  Meta* meta[k_max_ranks] = {};                    // every rank's Meta (mapped)
  std::int32_t* rank_prefix_matrix = nullptr;      // out [ranks, ranks]
  std::int32_t* send_row = nullptr;                // out [tokens, ranks]
  std::int32_t* recv_tokens_per_expert = nullptr;  // out [local experts], aligned
  std::int32_t* offsets_scratch = nullptr;         // local [k_offsets_ints]: block 0 -> scan blocks
  // Internode forwarding: this rank's tokens are rows received from
  // num_segments source nodes, segment s being rows [segment_begin[s],
  // segment_begin[s + 1]). num_tokens_per_rank and num_tokens_per_expert are
  // then one array per segment, segment_stride_* apart, and every
  // destination orders its rows by (segment, forwarding rank): by global
  // source rank. One segment (stride 0) is the intranode dispatch.
  int num_segments = 1;
  std::int64_t segment_stride_ranks = 0;
  std::int64_t segment_stride_experts = 0;
  int segment_begin[k_max_nodes + 1] = {};
  /// Optional, on the device: [num_segments + 1] bounds read there instead
  /// of segment_begin (an internode dispatch on the device-driven leg, whose
  /// sizes never reach the host); num_tokens is then a bound, and the rows
  /// past the last segment go nowhere (send_row -1).
  const std::int32_t* segment_begin_device = nullptr;
  /// Out, optional: int32 [segments * ranks], inclusive prefix of the rows
  /// this rank receives from each global source rank (DeepEP's
  /// recv_gbl_rank_prefix_sum).
  std::int32_t* recv_gbl_prefix = nullptr;
};
/// Ints of NotifyParams::offsets_scratch: an offset per (segment, rank), a flag.
constexpr int k_offsets_ints = k_max_nodes * k_max_ranks + 2;
cudaError_t launch_notify(const NotifyParams& p, cudaStream_t stream);

struct DispatchParams {
  SyncParams sync;
  /// Optional: the tokens are rows the network leg is still landing, chunk
  /// by chunk; a warp waits for its row's chunk before it reads it, and the
  /// node's own segment goes first.
  LegChunks arrival;
  bool entry_barrier = true;  // false: the notify kernel before it was one
  // Barrier epochs past epoch_base: after a notify kernel (epoch + 1) a
  // dispatch that publishes its offsets has its own entry barrier at + 2.
  int entry_epoch = 1;
  int exit_epoch = 2;
  /// Block 0 publishes own_offsets in this rank's Meta before the entry
  /// barrier, and every block takes each destination's regions from its
  /// Meta after it (heap[r] + offset) instead of recv_* below. Needs the
  /// entry barrier. Intranode Buffers; an internode node's forwarding
  /// dispatch writes the fixed regions.
  bool read_offsets = false;
  std::int64_t own_offsets[k_dispatch_fields] = {};
  Meta* meta[k_max_ranks] = {};
  std::uint8_t* heap[k_max_ranks] = {};
  /// Optional int32 [ranks, ranks], anywhere: block 0 copies
  /// rank_prefix_matrix there (a caller's tensor, no copy launch).
  std::int32_t* prefix_out = nullptr;
  const std::uint8_t* x = nullptr;
  std::int64_t x_stride = 0;  // bytes between tokens
  int row_bytes = 0;          // hidden * element size, multiple of 16
  const float* scales = nullptr;
  std::int64_t scale_stride_token = 0;
  std::int64_t scale_stride_hidden = 0;
  int num_scales = 0;
  const void* topk = nullptr;
  bool topk_int64 = true;
  std::int64_t topk_stride = 0;
  int num_topk = 0;
  const float* weights = nullptr;
  std::int64_t weights_stride = 0;
  const std::int32_t* send_row = nullptr;  // [tokens, ranks]
  int num_tokens = 0;
  int experts_per_rank = 0;
  // Every rank's receive regions (mapped); rows are packed. With
  // read_offsets only this rank's entry is used (its own padding rows).
  std::uint8_t* recv_x[k_max_ranks] = {};
  float* recv_scales[k_max_ranks] = {};
  void* recv_topk[k_max_ranks] = {};
  float* recv_weights[k_max_ranks] = {};
  std::int32_t* recv_src[k_max_ranks] = {};
  // num_worst_tokens: this rank pads rows [received, num_worst) itself.
  int num_worst_tokens = 0;
  const std::int32_t* rank_prefix_matrix = nullptr;
  int num_warps = 32;
  int chunk = 4;
  int num_blocks = 24;
};
cudaError_t launch_dispatch(const DispatchParams& p, cudaStream_t stream);

struct CombineParams {
  SyncParams sync;  // entry barrier epoch + 1, exit epoch + 2
  /// Optional: counts each forwarded row written per (segment, chunk), so
  /// the network leg takes a chunk of sums as soon as it is complete.
  LegChunks departure;
  /// false: a notify_peers launch before this one published the offsets
  /// below and ran the entry barrier (an internode Buffer's node combine).
  bool entry_barrier = true;
  // Published into this rank's Meta by block 0 before the entry barrier.
  std::int64_t x_offset = 0;
  std::int64_t x_stride = 0;
  std::int64_t w_offset = -1;
  std::int64_t w_stride = 0;
  Meta* meta[k_max_ranks] = {};
  const std::uint8_t* heap[k_max_ranks] = {};  // every rank's heap base (mapped)
  const std::int32_t* send_row = nullptr;      // [tokens, ranks]
  int num_tokens = 0;
  /// Optional, on the device: the tokens really there when num_tokens is a
  /// bound (see NotifyParams::segment_begin_device); rows past it are not
  /// written.
  const std::int32_t* num_tokens_bound = nullptr;
  int hidden = 0;  // BF16 elements, multiple of 8
  int num_topk = 0;
  /// Optional BF16 [tokens, hidden] each: every sum starts from bias[0],
  /// then bias[1] (FP32), before the ranks' rows.
  const std::uint16_t* bias[2] = {nullptr, nullptr};
  std::int64_t bias_stride[2] = {0, 0};  // elements between tokens
  std::uint16_t* out_x = nullptr;        // BF16 [tokens, hidden]
  float* out_weights = nullptr;          // [tokens, topk] or null
  int num_warps = 32;
  int chunk = 4;
  int num_blocks = 24;
};
cudaError_t launch_combine(const CombineParams& p, cudaStream_t stream);

/// The chunk the combine kernel really uses for `ranks` (it keeps ranks x
/// chunk vectors in registers, at most 16).
int combine_effective_chunk(int chunk, int ranks);

}  // namespace epkit::ep::kernels
