// load_secret: apart from the HMAC so that the fuzz targets link the
// handshake's code without the host layer.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/auth.h"
#include "runtime/socket.h"

namespace epkit::runtime {

namespace {

// The secret file: a regular file, opened without blocking (a fifo put in its
// place must not hang the node) and read up to one byte past the cap.
Result<std::string> read_secret_file(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) {
    return make_error(ErrorCode::not_found,
                      fmt::format("EPKIT_SECRET_FILE={}: {}", path, std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return make_error(ErrorCode::invalid,
                      fmt::format("EPKIT_SECRET_FILE={} is not a regular file", path));
  }
  std::string text;
  char buffer[1024];
  while (text.size() <= k_max_secret_bytes) {
    ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return make_error(ErrorCode::invalid,
                        fmt::format("EPKIT_SECRET_FILE={}: {}", path, std::strerror(errno)));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

}  // namespace

Result<std::string> load_secret(const host::Env& env) {
  std::string secret;
  std::string source;
  if (auto path = env.get_nonempty("EPKIT_SECRET_FILE")) {
    auto text = read_secret_file(*path);
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
