// The device's read of the count messages (leg_counts.h): one thread, since
// a message is a few dozen ints a node; the sizes then stay on the device.
#include "ep/core/ep_device.cuh"
#include "ep/internode/leg_counts.h"

namespace epkit::ep::kernels {
namespace {

__global__ void leg_counts_kernel(LegCountsParams p) {
  const LegMessageFault fault =
      read_leg_counts(p.received, p.sent, p.place, p.format, p.message_ints, p.sequence,
                      p.max_tokens, p.max_topk, *p.out);
  if (fault.kind != LegMessageFault::none)
    fail(p.mailbox, k_bad_leg_message, p.place.global(fault.node), pack_leg_fault(fault));
}

}  // namespace

cudaError_t launch_leg_counts(const LegCountsParams& p, cudaStream_t stream) {
  if (p.place.nodes < 1 || p.place.nodes > k_max_nodes || p.message_ints < p.format.min_ints() ||
      p.out == nullptr)
    return cudaErrorInvalidValue;
  leg_counts_kernel<<<1, 1, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace epkit::ep::kernels
