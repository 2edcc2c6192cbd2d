// Buffer::create and Buffer::bytes_needed: the engine's entry, which picks
// the mode's Buffer from the options: the intranode Buffer
// (ep/intranode/buffer.h, with the low-latency mode) for a job on one node,
// the internode one (ep/internode/buffer.h) across nodes.
#include "ep/intranode/buffer.h"

#include <fmt/format.h>

#include <memory>

#include "ep/internode/buffer.h"

namespace epkit::ep {

namespace {
bool internode(const BufferOptions& options, int num_ranks) {
  return options.ranks_per_node > 0 && options.ranks_per_node < num_ranks;
}
}  // namespace

std::size_t Buffer::bytes_needed(const BufferOptions& options, int num_ranks) {
  if (internode(options, num_ranks)) return internode_bytes(options, num_ranks);
  return heap_layout(options, num_ranks).total;
}

Result<std::unique_ptr<Buffer>> Buffer::create(Bootstrap& bootstrap, const BufferOptions& options) {
  if (options.enable_shrink)
    return invalid(
        "BufferOptions.enable_shrink: DeepEP's rank masking (shrink mode) is not supported; a "
        "rank that stops makes the others fail within timeout_s naming it");
  if (options.low_latency_bytes != 0 && bootstrap.world_size() > kernels::k_low_latency_max_ranks)
    return invalid(fmt::format(
        "BufferOptions.low_latency_bytes: the low-latency mode spans at most {} ranks, this "
        "Buffer has {}",
        kernels::k_low_latency_max_ranks, bootstrap.world_size()));
  if (internode(options, bootstrap.world_size())) return make_internode_buffer(bootstrap, options);
  if (options.ranks_per_node < 0 || options.ranks_per_node > bootstrap.world_size())
    return invalid(fmt::format("BufferOptions.ranks_per_node = {} with {} ranks",
                               options.ranks_per_node, bootstrap.world_size()));
  auto buffer = std::make_unique<BufferImpl>();
  EPKIT_TRY(buffer->init(bootstrap, options));
  return std::unique_ptr<Buffer>(std::move(buffer));
}

}  // namespace epkit::ep
