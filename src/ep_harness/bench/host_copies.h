// Host copies of the engine's and the reference's outputs, which the checks
// compare and the dump writes.
#pragma once

#include <epkit/ep.h>

#include <cstdint>
#include <vector>

#include "ep/testing.h"
#include "ep_harness/reference.h"

namespace epkit::harness::detail {

using ep::DType;
using ep::TensorView;

std::vector<int> as_ints(const std::vector<std::uint8_t>& bytes);

// A host copy of one tensor with what the dump needs to write it.
struct HostTensor {
  DType dtype = DType::bf16;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
  std::size_t row_bytes() const {
    return shape.size() == 2 ? static_cast<std::size_t>(shape[1]) * ep::dtype_size(dtype)
                             : ep::dtype_size(dtype);
  }
};

Result<HostTensor> copy(const TensorView& v);

// One dispatch's outputs on the host, the engine's or the reference's.
struct HostDispatch {
  std::int64_t rows = 0;
  HostTensor recv_x;
  HostTensor recv_x_scales;
  HostTensor recv_topk_idx;
  HostTensor recv_topk_weights;
  HostTensor recv_src_idx;  // empty across nodes (the engine has none there, as DeepEP)
  std::vector<int> rank_prefix_matrix;
  /// Across nodes, instead of the matrix: this rank's column of it, from the
  /// handle's recv_gbl_rank_prefix_sum (rows from rank r end at element r).
  std::vector<int> recv_gbl_rank_prefix_sum;
  std::vector<int> per_expert;
};

/// The handle's prefix: rank_prefix_matrix for an intranode handle,
/// recv_gbl_rank_prefix_sum for an internode one (num_nodes > 1).
Result<HostDispatch> copy_dispatch(const ep::DispatchResult& r, bool routing);
Result<HostDispatch> copy_reference(const ReferenceDispatch& r);

struct HostCombine {
  HostTensor combined_x;
  HostTensor combined_topk_weights;
};

}  // namespace epkit::harness::detail
