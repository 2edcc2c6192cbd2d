// Timing pieces of `epkit bench ep`: the caller's stream, a bounded wait
// for it, and DeepEP's bench() loop (events around each call, an L2 flush
// before each).
#pragma once

#include <cuda_runtime_api.h>
#include <epkit/ep.h>

#include <string>
#include <utility>
#include <vector>

#include "base/cuda_error.h"
#include "bench/ep_bench.h"
#include "ep/testing.h"
#include "runtime/deadline.h"

namespace epkit::harness::detail {

using runtime::Deadline;

// The caller's stream of DeepEP's tests (its compute stream): every engine
// call waits for it and makes it wait, so events recorded on it around a
// call bracket the whole operation.
class OwnedStream {
 public:
  static Result<OwnedStream> create() {
    OwnedStream s;
    EPKIT_TRY(cuda_ok(cudaStreamCreateWithFlags(&s.m_stream, cudaStreamNonBlocking),
                      "cudaStreamCreateWithFlags"));
    return s;
  }
  OwnedStream(OwnedStream&& other) noexcept : m_stream(std::exchange(other.m_stream, nullptr)) {}
  OwnedStream& operator=(OwnedStream&&) = delete;
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  ~OwnedStream() {
    if (m_stream != nullptr) cudaStreamDestroy(m_stream);
  }
  cudaStream_t get() const { return m_stream; }

 private:
  OwnedStream() = default;
  cudaStream_t m_stream = nullptr;
};

/// A bounded wait: the engine's own waits for peers end in its timeout, this
/// catches anything else that never completes.
Result<void> wait_stream(cudaStream_t stream, Deadline deadline, const std::string& what);

// Start and stop events per timed run and the L2 flush buffer, made once.
class Timer {
 public:
  static Result<Timer> create(int iters, std::size_t flush_bytes) {
    Timer t;
    for (int i = 0; i < iters; ++i) {
      for (auto* list : {&t.m_start, &t.m_stop}) {
        cudaEvent_t e = nullptr;
        EPKIT_TRY(cuda_ok(cudaEventCreate(&e), "cudaEventCreate"));
        list->emplace_back(e);
      }
    }
    auto flush = ep::DeviceMemory::allocate(flush_bytes);
    if (!flush) return flush.error();
    t.m_flush = std::move(*flush);
    return t;
  }

  // DeepEP's bench(): warm-up calls, then each timed call alone between two
  // events, preceded by a write of the flush buffer so that no run finds the
  // previous one's data in L2.
  template <typename Op>
  Result<bench::EpTiming> run(cudaStream_t stream, int warmup, Op&& op, Deadline deadline,
                              const std::string& what) {
    for (int i = 0; i < warmup; ++i) EPKIT_TRY(op());
    for (std::size_t i = 0; i < m_start.size(); ++i) {
      EPKIT_TRY(cuda_ok(cudaMemsetAsync(m_flush.get(), 0, m_flush.size(), stream),
                        "cudaMemsetAsync (L2 flush)"));
      EPKIT_TRY(cuda_ok(cudaEventRecord(m_start[i].get(), stream), "cudaEventRecord"));
      EPKIT_TRY(op());
      EPKIT_TRY(cuda_ok(cudaEventRecord(m_stop[i].get(), stream), "cudaEventRecord"));
    }
    EPKIT_TRY(wait_stream(stream, deadline, what));
    std::vector<double> samples;
    samples.reserve(m_start.size());
    for (std::size_t i = 0; i < m_start.size(); ++i) {
      float ms = 0;
      EPKIT_TRY(cuda_ok(cudaEventElapsedTime(&ms, m_start[i].get(), m_stop[i].get()),
                        "cudaEventElapsedTime"));
      samples.push_back(static_cast<double>(ms) * 1000.0);
    }
    return bench::ep_summarize(std::move(samples));
  }

 private:
  Timer() = default;
  std::vector<ep::Event> m_start;
  std::vector<ep::Event> m_stop;
  ep::DeviceMemory m_flush;
};

}  // namespace epkit::harness::detail
