// The figures ep/testing.h lends the harness, read from the modes' own
// definitions.
#include "ep/testing.h"

#include "ep/internode/buffer.h"
#include "ep/low_latency/kernels.h"
#include "ep/low_latency/region.h"

namespace epkit::ep::testing {

int low_latency_max_topk() {
  return kernels::k_low_latency_max_topk;
}

Result<void> check_low_latency_shape(int max_tokens, int hidden, int num_ranks, int num_experts) {
  auto region = low_latency::region_for(max_tokens, hidden, num_ranks, num_experts);
  if (!region) return region.error();
  return {};
}

std::size_t internode_row_bytes(DType x_dtype, int hidden, int topk_size, int num_topk,
                                bool with_weights, int ranks_per_node) {
  return row_format(x_dtype, hidden, topk_size, num_topk, with_weights, ranks_per_node).pitch;
}

std::int64_t internode_message_bytes(const BufferOptions& options, int num_ranks) {
  return static_cast<std::int64_t>(internode_layout(options, num_ranks).message_ints) * 4;
}

}  // namespace epkit::ep::testing
