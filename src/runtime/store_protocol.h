// Wire format of the rendezvous store (docs/runtime.md, "Store protocol").
//
// A frame is a 4-byte big-endian payload length followed by the payload. A
// payload is one opcode byte and fields: u32 and i64 big-endian, strings as a
// u32 length and the bytes. Every length is checked against what is left of
// the frame, and frames are bounded, so garbage or a hostile length prefix is
// an error, never a large allocation.
#pragma once

#include <epkit/result.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace epkit::runtime::wire {

inline constexpr std::uint32_t k_magic = 0x45504b53;  // "EPKS"
inline constexpr std::uint32_t k_protocol_version = 1;
/// Largest payload either side accepts (an ncclUniqueId is 128 bytes, a
/// rank's facts a few KiB).
inline constexpr std::uint32_t k_max_frame = 1 << 20;
inline constexpr std::size_t k_max_key = 1024;

enum class Op : std::uint8_t {
  hello = 1,    // u32 magic, u32 protocol, u32 rank, u32 world, str host, str epkit, str tag
  set = 2,      // str key, str value
  get = 3,      // str key, u32 timeout_ms: waits until the key exists
  wait = 4,     // u32 count, str key..., u32 timeout_ms
  add = 5,      // str key, i64 delta: returns the new value
  barrier = 6,  // str name, u32 timeout_ms
  bye = 7,      // a clean leave: closing afterwards is not a failure
};

/// Reply payload: u8 status (0 ok, else 1 + ErrorCode) and str body (the
/// value, the counter as decimal text, or the error message).
inline constexpr std::uint8_t k_status_ok = 0;

class Writer {
 public:
  explicit Writer(Op op) { m_payload.push_back(static_cast<char>(op)); }
  Writer() = default;
  Writer& u8(std::uint8_t value);
  Writer& u32(std::uint32_t value);
  Writer& i64(std::int64_t value);
  Writer& str(std::string_view value);
  /// Length prefix + payload.
  std::string frame() const;

 private:
  std::string m_payload;
};

class Reader {
 public:
  explicit Reader(std::string_view payload) : m_rest(payload) {}
  Result<std::uint8_t> u8();
  Result<std::uint32_t> u32();
  Result<std::int64_t> i64();
  Result<std::string> str(std::size_t max_len = k_max_frame);
  bool done() const { return m_rest.empty(); }

 private:
  std::string_view m_rest;
};

/// The payload length of a frame header, or invalid when it is 0 or above
/// k_max_frame.
Result<std::uint32_t> frame_length(std::string_view header4);

}  // namespace epkit::runtime::wire
