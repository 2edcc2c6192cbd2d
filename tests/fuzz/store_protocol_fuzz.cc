// libFuzzer target for the rendezvous store's wire parsers: whatever bytes a
// peer sends as a frame header, a hello, a request, a challenge or a reply
// must be parsed or refused without a crash, an unbounded allocation or a
// value outside what the parsers promise (runtime/store_protocol.h).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/auth.h"
#include "runtime/store_protocol.h"

namespace {

namespace wire = epkit::runtime::wire;

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (bytes.size() >= 4) {
    auto len = wire::frame_length(bytes.substr(0, 4), wire::k_max_hello_frame);
    if (len) check(*len >= 1 && *len <= wire::k_max_hello_frame);
  }
  std::string_view signed_part;
  if (auto hello = wire::parse_hello(bytes, &signed_part)) {
    check(wire::valid_host(hello->host));
    check(wire::printable_ascii(hello->epkit) && hello->epkit.size() <= wire::k_max_version);
    check(wire::printable_ascii(hello->tag) && hello->tag.size() <= wire::k_max_tag);
    check(hello->nonce.size() == epkit::runtime::k_nonce_bytes);
    check(hello->mac.size() == epkit::runtime::k_mac_bytes);
    // The signed part is the payload less its MAC field, and re-encoding the
    // hello with the MAC it claims reproduces the input.
    check(signed_part.size() + 4 + epkit::runtime::k_mac_bytes == bytes.size());
    check(signed_part.data() == bytes.data());
  }
  if (auto request = wire::parse_request(bytes)) {
    check(request->key.size() <= wire::k_max_key);
    check(request->keys.size() <= wire::k_max_wait_keys);
    for (const auto& key : request->keys) check(key.size() <= wire::k_max_key);
    check(request->value.size() <= bytes.size());
    check(request->op != wire::Op::hello);
  }
  if (auto challenge = wire::parse_challenge(bytes)) {
    check(challenge->protocol != wire::k_protocol_version ||
          challenge->nonce.size() == epkit::runtime::k_nonce_bytes);
  }
  if (auto reply = wire::parse_reply(bytes)) {
    check(reply->body.size() <= bytes.size());
  }
  return 0;
}
