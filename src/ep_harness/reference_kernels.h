// Device pieces of the reference path (ep_harness/reference.h): packing rows for
// NCCL and summing the rows combine brings back. Kept apart from the engine's
// kernels so that the two share no code.
#pragma once

#ifdef EPKIT_WITH_CUDA

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace epkit::harness::kernels {

/// dst row i (rows packed, row_bytes each) = src row rows[i], where src rows
/// start src_stride_bytes apart. `rows` is a device array of num_rows.
cudaError_t reference_gather_rows(void* dst, const void* src, std::int64_t src_stride_bytes,
                                  std::size_t row_bytes, const int* rows, int num_rows,
                                  cudaStream_t stream);

/// out[t, :] = BF16(sum over r = 0..ranks-1 with packed_row[t * ranks + r] >= 0
/// of FP32(recv[packed_row[t * ranks + r], :])): the sum starts at 0.0f plus
/// the optional biases (BF16 [tokens, hidden], packed; bias0 then bias1),
/// adds the ranks in order and rounds once (round to nearest even); tokens
/// with no row give their bias. out and recv are BF16 [*, hidden], rows
/// packed. Across nodes each node's sum is rounded, and the biases open the
/// sum over nodes instead.
cudaError_t reference_combine_bf16(void* out, const void* recv, const int* packed_row, int tokens,
                                   int ranks, int ranks_per_node, int hidden, const void* bias0,
                                   const void* bias1, cudaStream_t stream);

/// The same for FP32 [*, cols] rows (top-k weights): FP32 sums in rank order.
cudaError_t reference_combine_fp32(float* out, const float* recv, const int* packed_row, int tokens,
                                   int ranks, int ranks_per_node, int cols, cudaStream_t stream);

}  // namespace epkit::harness::kernels

#endif
