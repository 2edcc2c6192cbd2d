// Bytes as hex text and back: how handles (CUDA IPC handles, NCCL unique
// ids) travel through a Bootstrap, whose all_gather carries strings.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdio>
#include <string>

namespace epkit::ep {

inline std::string to_hex(const void* data, std::size_t n) {
  std::string s;
  const auto* b = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) s += fmt::format("{:02x}", b[i]);
  return s;
}

/// False when `s` is not 2 * n hex digits.
inline bool from_hex(const std::string& s, void* out, std::size_t n) {
  if (s.size() != 2 * n) return false;
  auto* b = static_cast<unsigned char*>(out);
  for (std::size_t i = 0; i < n; ++i) {
    unsigned int v = 0;
    if (std::sscanf(s.c_str() + 2 * i, "%2x", &v) != 1) return false;
    b[i] = static_cast<unsigned char>(v);
  }
  return true;
}

}  // namespace epkit::ep
