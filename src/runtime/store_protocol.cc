#include "runtime/store_protocol.h"

#include <fmt/format.h>

namespace epkit::runtime::wire {
namespace {

Error truncated(std::string_view what) {
  return make_error(ErrorCode::invalid, fmt::format("malformed store message: truncated {}", what));
}

}  // namespace

Writer& Writer::u8(std::uint8_t value) {
  m_payload.push_back(static_cast<char>(value));
  return *this;
}

Writer& Writer::u32(std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8)
    m_payload.push_back(static_cast<char>(value >> shift));
  return *this;
}

Writer& Writer::i64(std::int64_t value) {
  auto bits = static_cast<std::uint64_t>(value);
  for (int shift = 56; shift >= 0; shift -= 8)
    m_payload.push_back(static_cast<char>(bits >> shift));
  return *this;
}

Writer& Writer::str(std::string_view value) {
  u32(static_cast<std::uint32_t>(value.size()));
  m_payload.append(value);
  return *this;
}

std::string Writer::frame() const {
  Writer header;
  header.u32(static_cast<std::uint32_t>(m_payload.size()));
  return header.m_payload + m_payload;
}

Result<std::uint8_t> Reader::u8() {
  if (m_rest.empty()) return truncated("byte");
  auto value = static_cast<std::uint8_t>(m_rest.front());
  m_rest.remove_prefix(1);
  return value;
}

Result<std::uint32_t> Reader::u32() {
  if (m_rest.size() < 4) return truncated("u32");
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value = (value << 8) | static_cast<std::uint8_t>(m_rest[i]);
  m_rest.remove_prefix(4);
  return value;
}

Result<std::int64_t> Reader::i64() {
  if (m_rest.size() < 8) return truncated("i64");
  std::uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value = (value << 8) | static_cast<std::uint8_t>(m_rest[i]);
  m_rest.remove_prefix(8);
  return static_cast<std::int64_t>(value);
}

Result<std::string> Reader::str(std::size_t max_len) {
  auto len = u32();
  if (!len) return len.error();
  if (*len > m_rest.size()) return truncated("string");
  if (*len > max_len) {
    return make_error(
        ErrorCode::invalid,
        fmt::format("malformed store message: string of {} bytes exceeds {}", *len, max_len));
  }
  std::string value(m_rest.substr(0, *len));
  m_rest.remove_prefix(*len);
  return value;
}

Result<std::uint32_t> frame_length(std::string_view header4) {
  Reader reader(header4);
  auto len = reader.u32();
  if (!len) return len.error();
  if (*len == 0 || *len > k_max_frame) {
    return make_error(ErrorCode::invalid,
                      fmt::format("malformed store message: frame length {} is outside 1..{} "
                                  "(not an epkit store client?)",
                                  *len, k_max_frame));
  }
  return *len;
}

}  // namespace epkit::runtime::wire
