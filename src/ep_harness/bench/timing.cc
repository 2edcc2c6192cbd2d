#include "ep_harness/bench/timing.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>

namespace epkit::harness::detail {

Result<void> wait_stream(cudaStream_t stream, Deadline deadline, const std::string& what) {
  for (;;) {
    cudaError_t rc = cudaStreamQuery(stream);
    if (rc == cudaSuccess) return {};
    if (rc != cudaErrorNotReady) return cuda_error(rc, what);
    if (deadline.expired()) {
      return make_error(ErrorCode::timeout,
                        fmt::format("bench ep: {} did not finish within the timeout", what));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace epkit::harness::detail
