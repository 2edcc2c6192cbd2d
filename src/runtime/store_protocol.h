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
#include <vector>

namespace epkit::runtime::wire {

inline constexpr std::uint32_t k_magic = 0x45504b53;  // "EPKS"
// 2: the challenge and the secret's proofs in the hello and its reply.
inline constexpr std::uint32_t k_protocol_version = 2;
/// Largest payload either side accepts (an ncclUniqueId is 128 bytes, a
/// rank's facts a few KiB).
inline constexpr std::uint32_t k_max_frame = 1 << 20;
inline constexpr std::size_t k_max_key = 1024;
/// Before its hello proved the secret a peer is a stranger: its frames are
/// bounded far lower (a hello is a few hundred bytes).
inline constexpr std::uint32_t k_max_hello_frame = 8192;
inline constexpr std::size_t k_max_host = 253;
inline constexpr std::size_t k_max_version = 256;
inline constexpr std::size_t k_max_tag = 4096;
/// Keys one `wait` may name.
inline constexpr std::uint32_t k_max_wait_keys = 4096;

// The server speaks first: a challenge frame (no opcode) of u32 magic,
// u32 protocol and str nonce (32 bytes). The hello proves the secret over it.
enum class Op : std::uint8_t {
  hello = 1,    // u32 magic, u32 protocol, u32 rank, u32 world, str host, str epkit, str tag,
                // str client nonce (32), str mac (32): see hello_mac()
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
/// `max` (k_max_frame, or k_max_hello_frame before a peer's hello).
Result<std::uint32_t> frame_length(std::string_view header4, std::uint32_t max = k_max_frame);

// ---- parsed messages: everything a peer sends goes through one of these,
// which check every length, range and character before the caller sees it.

struct Challenge {
  std::uint32_t protocol = 0;
  std::string nonce;
};
std::string challenge_frame(std::string_view nonce);
/// A server's first frame (the payload); "not an epkit store" when the magic
/// is wrong.
Result<Challenge> parse_challenge(std::string_view payload);

struct Hello {
  std::uint32_t protocol = k_protocol_version;
  std::uint32_t rank = 0;
  std::uint32_t world = 0;
  std::string host;   // address characters only (valid_host)
  std::string epkit;  // printable ASCII
  std::string tag;    // printable ASCII
  std::string nonce;  // the client's, k_nonce_bytes
  std::string mac;    // hello_mac() of the rest
};
/// The MAC over the server's nonce and every field before the MAC.
std::string hello_mac(std::string_view secret, std::string_view server_nonce,
                      std::string_view signed_part);
/// The server's answer proving the secret back: over both nonces.
std::string welcome_mac(std::string_view secret, std::string_view server_nonce,
                        std::string_view client_nonce);
/// A complete hello frame for `hello` (its mac is computed here).
std::string hello_frame(const Hello& hello, std::string_view secret, std::string_view server_nonce);
/// A hello payload (opcode included). `signed_part` receives the bytes the
/// MAC covers. Only the magic and the framing are checked against protocol
/// 1's layout; fields are validated (lengths, characters).
Result<Hello> parse_hello(std::string_view payload, std::string_view* signed_part = nullptr);

/// Host names as they appear in messages: letters, digits and . _ : -,
/// 1..k_max_host bytes (a host name, an IPv4 or IPv6 address).
bool valid_host(std::string_view host);
/// Printable ASCII (0x20..0x7e) only.
bool printable_ascii(std::string_view text);

struct Request {
  Op op = Op::bye;
  std::string key;                // set, get, add, barrier
  std::string value;              // set
  std::vector<std::string> keys;  // wait
  std::int64_t delta = 0;         // add
  std::uint32_t timeout_ms = 0;   // get, wait, barrier
};
/// A request after the hello (opcode included). A second hello, an unknown
/// opcode, a short or overlong field or trailing bytes are errors.
Result<Request> parse_request(std::string_view payload);

struct Reply {
  std::uint8_t status = k_status_ok;
  std::string body;
};
/// A reply payload; its status must be ok or 1 + a known ErrorCode.
Result<Reply> parse_reply(std::string_view payload);

}  // namespace epkit::runtime::wire
