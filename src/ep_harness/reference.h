// The reference path: the engine's operations built on NCCL grouped
// send/recv and host-side bookkeeping, sharing no code with the engine. The
// conformance suite demands bitwise equality between the two.
//
// Combine sums in FP32 in rank order (rank 0 first) and rounds once to BF16,
// the order the engine uses; that makes bitwise equality a fair demand.
// Across nodes (NcclContext::ranks_per_node) it sums each node's ranks that
// way, rounds, and sums the nodes' results in node order, as the internode
// engine's forwarders and final reduce do.
#pragma once

#include <epkit/ep.h>
#include <epkit/result.h>

#include <array>
#include <vector>

#include "ep/testing.h"
#include "ep_harness/reference_plan.h"  // HostLayout, host_layout
#include "host/dl/nccl.h"

namespace epkit::harness {

struct NcclContext {
  const host::dl::NcclApi* api = nullptr;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int rank = 0;
  int num_ranks = 0;
  /// > 0: ranks form nodes of this many, and combine sums as the internode
  /// engine does: per node in rank order, rounded, then over nodes.
  int ranks_per_node = 0;
};

struct ReferenceDispatch {
  HostLayout layout;                    // this rank's
  std::vector<int> rank_prefix_matrix;  // [ranks * ranks]
  std::vector<int> send_row;            // [tokens * ranks], -1 = not sent
  int num_recv_tokens = 0;
  std::vector<int> num_recv_tokens_per_expert;  // aligned, as DispatchResult's
  ep::DeviceTensor recv_x;
  ep::DeviceTensor recv_x_scales;      // FP8 only, row-major
  ep::DeviceTensor recv_topk_idx;      // when topk was given; same dtype as the input
  ep::DeviceTensor recv_topk_weights;  // when weights were given
  ep::DeviceTensor recv_src_idx;       // int32
};

/// Uses args.x, x_scales, topk_idx, topk_weights and expert_alignment
/// (layout tensors, handle, num_worst_tokens and config are ignored).
/// Collective over the communicator; synchronous.
Result<ReferenceDispatch> reference_dispatch(const NcclContext& nccl, const ep::DispatchArgs& args,
                                             int num_experts);

struct ReferenceCombine {
  ep::DeviceTensor combined_x;             // BF16 [tokens, hidden]
  ep::DeviceTensor combined_topk_weights;  // FP32 [tokens, topk], when weights were given
};

/// x: BF16 [dispatch.num_recv_tokens, hidden] in receive order.
/// `bias`: optional BF16 [tokens, hidden] (this rank's tokens), contiguous,
/// as CombineArgs::bias.
Result<ReferenceCombine> reference_combine(const NcclContext& nccl,
                                           const ReferenceDispatch& dispatch,
                                           const ep::TensorView& x,
                                           const ep::TensorView& topk_weights,
                                           const std::array<ep::TensorView, 2>& bias = {});

}  // namespace epkit::harness
