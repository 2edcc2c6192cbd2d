// An all-gather over the conformance suite's NCCL communicator: every rank's
// `mine` (the same length on every rank), by rank. Both modes' suites share
// it (conformance.cc, conformance/low_latency_run.cc).
#pragma once

#ifdef EPKIT_WITH_CUDA

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "base/cuda_error.h"
#include "ep/testing.h"
#include "ep_harness/conformance_checks.h"
#include "ep_harness/reference.h"
#include "runtime/nccl_session.h"

namespace epkit::harness {

template <typename T>
Result<std::vector<T>> gather_all(runtime::NcclSession& session, const NcclContext& nccl,
                                  const std::vector<T>& mine, ncclDataType_t type,
                                  const std::string& milestone, runtime::Deadline deadline) {
  std::vector<T> all(mine.size() * static_cast<std::size_t>(nccl.num_ranks));
  if (mine.empty()) return all;
  auto send = ep::DeviceMemory::allocate(mine.size() * sizeof(T));
  if (!send) return send.error();
  auto recv = ep::DeviceMemory::allocate(all.size() * sizeof(T));
  if (!recv) return recv.error();
  // On NCCL's stream: a cudaMemcpy from pageable memory may return before
  // its DMA lands, and that stream does not wait for the legacy one.
  EPKIT_TRY(cuda_ok(cudaMemcpyAsync(send->get(), mine.data(), mine.size() * sizeof(T),
                                    cudaMemcpyHostToDevice, nccl.stream),
                    "cudaMemcpyAsync"));
  EPKIT_TRY(session.check(
      nccl.api->all_gather(send->get(), recv->get(), mine.size(), type, nccl.comm, nccl.stream),
      "ncclAllGather"));
  EPKIT_TRY(session.wait(milestone, deadline));
  EPKIT_TRY(
      cuda_ok(cudaMemcpy(all.data(), recv->get(), all.size() * sizeof(T), cudaMemcpyDeviceToHost),
              "cudaMemcpy"));
  if (!conformance::gathered_own_part_intact(all.data(), all.size() * sizeof(T), mine.data(),
                                             mine.size() * sizeof(T), nccl.rank))
    return make_error(ErrorCode::internal,
                      "'" + milestone + "': the all-gather returned this rank's own part changed");
  return all;
}

}  // namespace epkit::harness

#endif
