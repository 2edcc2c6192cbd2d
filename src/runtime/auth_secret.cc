// load_secret: apart from the HMAC so that the fuzz targets link the
// handshake's code without the host layer.
#include <fmt/format.h>

#include "host/sysroot.h"
#include "runtime/auth.h"

namespace epkit::runtime {

Result<std::string> load_secret(const host::Env& env) {
  std::string secret;
  std::string source;
  if (auto path = env.get_nonempty("EPKIT_SECRET_FILE")) {
    // The one bounded reader (regular files only, non-blocking): a fifo put
    // in its place must not hang the node. Read a little past the cap so the
    // length check below, after trimming, names a secret that is too long.
    auto text = host::read_regular_file(*path, "EPKIT_SECRET_FILE=" + *path,
                                        k_max_secret_bytes + 64, host::OverLimit::truncate);
    if (!text) return text.error();
    secret = std::move(*text);
    source = "EPKIT_SECRET_FILE=" + *path;
  } else if (auto value = env.get_nonempty("EPKIT_SECRET")) {
    secret = *value;
    source = "EPKIT_SECRET";
  } else {
    return std::string();
  }
  // `echo secret > file` and Kubernetes Secrets made from such a file end
  // in a newline that the other nodes' copies may lack.
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r' ||
                             secret.back() == ' ' || secret.back() == '\t')) {
    secret.pop_back();
  }
  if (secret.size() > k_max_secret_bytes) {
    return make_error(ErrorCode::invalid, fmt::format("{}: the secret is longer than {} bytes",
                                                      source, k_max_secret_bytes));
  }
  if (secret.size() < k_min_secret_bytes) {
    return make_error(ErrorCode::invalid,
                      fmt::format("{}: the secret has {} bytes, at least {} are needed (e.g. "
                                  "`head -c 32 /dev/urandom | base64`)",
                                  source, secret.size(), k_min_secret_bytes));
  }
  return secret;
}

}  // namespace epkit::runtime
