// What every mode's Buffer shares: argument checks and the communication
// stream, with the dispatch handle that frees its arrays on it. The modes'
// Buffers: ep/intranode/buffer.h (and the low-latency mode's members),
// ep/internode/buffer.h.
#pragma once

#include <epkit/ep.h>
#include <epkit/result.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace epkit::ep {

Error invalid(std::string message);
bool aligned16(const void* p);
/// Given: it has memory, or it is an empty matrix with a shape (a rank
/// with no tokens still says how many columns its top-k has).
bool given(const TensorView& v);
/// `into`'s memory when given, else the Buffer's own.
template <typename T>
T* output_or(const TensorView& into, T* own) {
  return into.data != nullptr ? static_cast<T*>(into.data) : own;
}
/// A row-major matrix of `dtype` whose rows are 16-byte aligned.
Result<void> check_rows(const TensorView& v, const char* name, DType dtype);

/// The communication stream, shared by the Buffer and its handles: a handle
/// frees its arrays on it, so it must live as long as the last of them.
struct Stream {
  cudaStream_t stream = nullptr;
  Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();
  /// Frees a handle's arrays on the stream, or, while the stream is being
  /// captured into a CUDA graph, later: a free queued then would be work the
  /// capture never joins back (cudaErrorStreamCaptureUnjoined), as when a
  /// caller drops an older handle in the middle of a captured step.
  void free_later(void* memory);
  /// Queues the frees put off by free_later, once nothing captures the stream.
  void drain();

 private:
  std::mutex m_mutex;
  std::vector<void*> m_deferred;
};

class Handle final : public DispatchHandle {
 public:
  Handle(void* memory, std::shared_ptr<Stream> stream)
      : m_memory(memory), m_stream(std::move(stream)) {}
  ~Handle() override {
    if (m_memory != nullptr) m_stream->free_later(m_memory);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  /// Optional, on the device: the tokens really dispatched when num_tokens
  /// is a bound (Segments::begin_device); a combine writes only those.
  const std::int32_t* num_tokens_device = nullptr;

 private:
  void* m_memory;
  std::shared_ptr<Stream> m_stream;
};

}  // namespace epkit::ep
