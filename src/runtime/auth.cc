#include "runtime/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

namespace epkit::runtime {

std::string hmac_sha256(std::string_view secret, std::string_view label, std::string_view data) {
  std::string message;
  message.reserve(label.size() + 1 + data.size());
  message.append(label).push_back('\0');
  message.append(data);
  // A non-null key even when empty: OpenSSL reads a null key as "no key".
  static const unsigned char k_empty = 0;
  const auto* key =
      secret.empty() ? &k_empty : reinterpret_cast<const unsigned char*>(secret.data());
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key, static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out,
           &len) == nullptr) {
    // Never a usable MAC: the peer's check fails and the handshake is refused.
    return std::string();
  }
  return std::string(reinterpret_cast<const char*>(out), len);
}

bool same_mac(std::string_view a, std::string_view b) {
  return a.size() == b.size() && !a.empty() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Result<std::string> random_bytes(std::size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    return make_error(ErrorCode::internal, "no random bytes from the system (OpenSSL RAND_bytes)");
  }
  return out;
}

}  // namespace epkit::runtime
