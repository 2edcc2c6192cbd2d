// The output arena's segment allocator: what PyTorch's caching allocator
// gets when a torch.cuda.MemPool over a Buffer's arena grows.
//
// Why: a dispatch's outputs allocated from that pool lie inside the Buffer's
// IPC-mapped heap, so the senders write the received rows straight into the
// caller's tensors (no copy out of the Buffer), and a combine of them reads
// them in place (no staging). PyTorch keeps its own rules for them: blocks
// cached per stream, record_stream, reuse after free. This allocator only
// carves the arena into segments; torch.cuda.memory.CUDAPluggableAllocator
// reaches it through the two C functions at the end of torch_ext.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>

namespace epkit_ext {

class OutputArena {
 public:
  /// The caching allocator asks in 2 MiB units; anything is rounded to it so
  /// that freed segments merge back without slivers.
  static constexpr std::size_t k_granule = std::size_t{2} << 20;

  OutputArena(void* base, std::size_t bytes)
      : m_base(static_cast<std::uint8_t*>(base)), m_bytes(bytes - bytes % k_granule) {
    if (m_bytes > 0) m_free.emplace(0, m_bytes);
  }

  /// A segment of at least `bytes`, or nullptr when no free range holds it
  /// (the caller then falls back to memory outside the arena). Best fit.
  void* allocate(std::size_t bytes) {
    if (bytes == 0 || bytes > m_bytes) return nullptr;
    const std::size_t size = (bytes + k_granule - 1) / k_granule * k_granule;
    std::lock_guard<std::mutex> lock(m_mutex);
    auto best = m_free.end();
    for (auto it = m_free.begin(); it != m_free.end(); ++it)
      if (it->second >= size && (best == m_free.end() || it->second < best->second)) best = it;
    if (best == m_free.end()) return nullptr;
    const std::size_t at = best->first;
    const std::size_t left = best->second - size;
    m_free.erase(best);
    if (left > 0) m_free.emplace(at + size, left);
    m_used.emplace(at, size);
    m_in_use += size;
    return m_base + at;
  }

  /// Returns a segment; false when `p` is not one of this arena's.
  bool release(void* p) {
    auto* q = static_cast<std::uint8_t*>(p);
    if (q < m_base || q >= m_base + m_bytes) return false;
    std::lock_guard<std::mutex> lock(m_mutex);
    auto used = m_used.find(static_cast<std::size_t>(q - m_base));
    if (used == m_used.end()) return false;
    std::size_t at = used->first;
    std::size_t size = used->second;
    m_used.erase(used);
    m_in_use -= size;
    // Merge with the free neighbours.
    auto next = m_free.lower_bound(at);
    if (next != m_free.end() && next->first == at + size) {
      size += next->second;
      next = m_free.erase(next);
    }
    if (next != m_free.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == at) {
        at = prev->first;
        size += prev->second;
        m_free.erase(prev);
      }
    }
    m_free.emplace(at, size);
    return true;
  }

  bool contains(const void* p) const {
    const auto* q = static_cast<const std::uint8_t*>(p);
    return q >= m_base && q < m_base + m_bytes;
  }
  std::size_t bytes() const { return m_bytes; }
  std::size_t in_use() const {
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_in_use;
  }

 private:
  std::uint8_t* m_base;
  std::size_t m_bytes;
  mutable std::mutex m_mutex;
  std::map<std::size_t, std::size_t> m_free;  // offset -> bytes
  std::map<std::size_t, std::size_t> m_used;  // offset -> bytes
  std::size_t m_in_use = 0;
};

}  // namespace epkit_ext
