#include "runtime/store_protocol.h"

#include <fmt/format.h>

#include "runtime/auth.h"

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

Result<std::uint32_t> frame_length(std::string_view header4, std::uint32_t max) {
  Reader reader(header4);
  auto len = reader.u32();
  if (!len) return len.error();
  if (*len == 0 || *len > max) {
    return make_error(ErrorCode::invalid,
                      fmt::format("malformed store message: frame length {} is outside 1..{} "
                                  "(not an epkit store client?)",
                                  *len, max));
  }
  return *len;
}

namespace {

Error malformed(std::string_view what) {
  return make_error(ErrorCode::invalid, fmt::format("malformed store message: {}", what));
}

}  // namespace

bool valid_host(std::string_view host) {
  if (host.empty() || host.size() > k_max_host) return false;
  for (char c : host) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_' || c == ':';
    if (!ok) return false;
  }
  return true;
}

bool printable_ascii(std::string_view text) {
  for (char c : text) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

std::string challenge_frame(std::string_view nonce) {
  return Writer().u32(k_magic).u32(k_protocol_version).str(nonce).frame();
}

Result<Challenge> parse_challenge(std::string_view payload) {
  Reader reader(payload);
  auto magic = reader.u32();
  if (!magic || *magic != k_magic) return malformed("not an epkit store");
  auto protocol = reader.u32();
  if (!protocol) return malformed("truncated challenge");
  Challenge challenge{*protocol, {}};
  if (*protocol != k_protocol_version) return challenge;  // the caller names both versions
  auto nonce = reader.str(k_nonce_bytes);
  if (!nonce || nonce->size() != k_nonce_bytes || !reader.done()) {
    return malformed("bad challenge");
  }
  challenge.nonce = std::move(*nonce);
  return challenge;
}

std::string hello_mac(std::string_view secret, std::string_view server_nonce,
                      std::string_view signed_part) {
  std::string data(server_nonce);
  data.append(signed_part);
  return hmac_sha256(secret, "epkit store hello", data);
}

std::string welcome_mac(std::string_view secret, std::string_view server_nonce,
                        std::string_view client_nonce) {
  std::string data(server_nonce);
  data.append(client_nonce);
  return hmac_sha256(secret, "epkit store welcome", data);
}

namespace {

Writer hello_fields(const Hello& hello) {
  Writer writer(Op::hello);
  writer.u32(k_magic)
      .u32(hello.protocol)
      .u32(hello.rank)
      .u32(hello.world)
      .str(hello.host)
      .str(hello.epkit)
      .str(hello.tag)
      .str(hello.nonce);
  return writer;
}

}  // namespace

std::string hello_frame(const Hello& hello, std::string_view secret,
                        std::string_view server_nonce) {
  Writer writer = hello_fields(hello);
  // The payload so far (without the frame header) is what the MAC covers.
  std::string framed = writer.frame();
  std::string_view signed_part = std::string_view(framed).substr(4);
  writer.str(hello_mac(secret, server_nonce, signed_part));
  return writer.frame();
}

Result<Hello> parse_hello(std::string_view payload, std::string_view* signed_part) {
  Reader reader(payload);
  auto op = reader.u8();
  auto magic = reader.u32();
  if (!op || *op != static_cast<std::uint8_t>(Op::hello) || !magic || *magic != k_magic) {
    return malformed("expected an epkit store hello (not an epkit client?)");
  }
  Hello hello;
  auto protocol = reader.u32();
  auto rank = reader.u32();
  auto world = reader.u32();
  auto host = reader.str(k_max_host);
  auto epkit = reader.str(k_max_version);
  auto tag = reader.str(k_max_tag);
  auto nonce = reader.str(k_nonce_bytes);
  // What is left is the MAC field: everything before it is signed.
  std::size_t mac_field = 4 + k_mac_bytes;
  auto mac = reader.str(k_mac_bytes);
  if (!protocol || !rank || !world || !host || !epkit || !tag || !nonce || !mac || !reader.done() ||
      payload.size() < mac_field) {
    return malformed("expected an epkit store hello (not an epkit client?)");
  }
  if (nonce->size() != k_nonce_bytes || mac->size() != k_mac_bytes) {
    return malformed("hello without the secret's proof");
  }
  if (!valid_host(*host) || !printable_ascii(*epkit) || !printable_ascii(*tag)) {
    return malformed("hello with characters outside its fields' sets");
  }
  hello.protocol = *protocol;
  hello.rank = *rank;
  hello.world = *world;
  hello.host = std::move(*host);
  hello.epkit = std::move(*epkit);
  hello.tag = std::move(*tag);
  hello.nonce = std::move(*nonce);
  hello.mac = std::move(*mac);
  if (signed_part != nullptr) *signed_part = payload.substr(0, payload.size() - mac_field);
  return hello;
}

Result<Request> parse_request(std::string_view payload) {
  Reader reader(payload);
  auto op = reader.u8();
  if (!op) return op.error();
  Request request;
  request.op = static_cast<Op>(*op);
  auto key = [&]() -> Result<void> {
    auto k = reader.str(k_max_key);
    if (!k) return k.error();
    request.key = std::move(*k);
    return {};
  };
  auto timeout = [&]() -> Result<void> {
    auto t = reader.u32();
    if (!t) return t.error();
    request.timeout_ms = *t;
    return {};
  };
  switch (request.op) {
    case Op::set: {
      EPKIT_TRY(key());
      auto value = reader.str();
      if (!value) return value.error();
      request.value = std::move(*value);
      break;
    }
    case Op::get:
    case Op::barrier:
      EPKIT_TRY(key());
      EPKIT_TRY(timeout());
      break;
    case Op::wait: {
      auto count = reader.u32();
      if (!count) return count.error();
      if (*count > k_max_wait_keys) {
        return malformed(fmt::format("wait on {} keys (at most {})", *count, k_max_wait_keys));
      }
      for (std::uint32_t i = 0; i < *count; ++i) {
        auto k = reader.str(k_max_key);
        if (!k) return k.error();
        request.keys.push_back(std::move(*k));
      }
      EPKIT_TRY(timeout());
      break;
    }
    case Op::add: {
      EPKIT_TRY(key());
      auto delta = reader.i64();
      if (!delta) return delta.error();
      request.delta = *delta;
      break;
    }
    case Op::bye:
      break;
    case Op::hello:
      return malformed("second hello on one connection");
    default:
      return malformed(fmt::format("unknown request type {}", *op));
  }
  if (!reader.done()) return malformed("trailing bytes after the request");
  return request;
}

Result<Reply> parse_reply(std::string_view payload) {
  Reader reader(payload);
  auto status = reader.u8();
  auto body = reader.str();
  if (!status || !body || !reader.done() || *status > 1 + static_cast<int>(ErrorCode::internal)) {
    return malformed("bad reply");
  }
  return Reply{*status, std::move(*body)};
}

}  // namespace epkit::runtime::wire
