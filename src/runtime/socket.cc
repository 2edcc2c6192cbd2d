#include "runtime/socket.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace epkit::runtime {
namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const { freeaddrinfo(info); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

Result<AddrInfoPtr> resolve_now(const std::string& host, const std::string& service,
                                const addrinfo& hints) {
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) {
    return make_error(ErrorCode::not_found,
                      fmt::format("cannot resolve '{}': {}", host, gai_strerror(rc)));
  }
  return AddrInfoPtr(found);
}

// A name lookup may wait on a DNS server for many seconds; getaddrinfo_a
// lets the wait end at the deadline. Numeric addresses and the wildcard need
// no lookup and take the plain path.
Result<AddrInfoPtr> resolve(const std::string& host, std::uint16_t port, bool passive,
                            Deadline deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  std::string service = std::to_string(port);
  if (host.empty()) return resolve_now(host, service, hints);
  addrinfo numeric = hints;
  numeric.ai_flags |= AI_NUMERICHOST;
  if (auto direct = resolve_now(host, service, numeric)) return direct;

  // Owned by the resolver thread until it completes or is cancelled.
  struct Request {
    std::string host;
    std::string service;
    addrinfo hints;
    gaicb cb;
  };
  auto* request = new Request{host, service, hints, {}};
  request->cb.ar_name = request->host.c_str();
  request->cb.ar_service = request->service.c_str();
  request->cb.ar_request = &request->hints;
  gaicb* list[1] = {&request->cb};
  if (int rc = getaddrinfo_a(GAI_NOWAIT, list, 1, nullptr); rc != 0) {
    delete request;
    return make_error(ErrorCode::not_found,
                      fmt::format("cannot resolve '{}': {}", host, gai_strerror(rc)));
  }
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.remaining());
    timespec wait{static_cast<time_t>(left.count() / 1'000'000'000),
                  static_cast<long>(left.count() % 1'000'000'000)};
    int rc = gai_suspend(list, 1, &wait);
    if (rc == EAI_INTR) continue;
    break;
  }
  int status = gai_error(&request->cb);
  if (status == EAI_INPROGRESS) {
    // A lookup that cannot be cancelled still writes into the request: it is
    // left to the resolver (a small leak, only on this path).
    if (gai_cancel(&request->cb) == EAI_CANCELED) delete request;
    return make_error(ErrorCode::timeout,
                      fmt::format("resolving '{}' did not finish before the deadline", host));
  }
  if (status != 0) {
    delete request;
    return make_error(ErrorCode::not_found,
                      fmt::format("cannot resolve '{}': {}", host, gai_strerror(status)));
  }
  AddrInfoPtr result(request->cb.ar_result);
  delete request;
  return result;
}

// Waits for `events` on fd until the deadline; EINTR restarts with the time left.
Result<short> wait_for(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd entry{fd, events, 0};
    int rc = ::poll(&entry, 1, deadline.poll_ms());
    if (rc > 0) return entry.revents;
    if (rc == 0) return make_error(ErrorCode::timeout, "timed out");
    if (errno != EINTR) return make_error(ErrorCode::internal, "poll: " + errno_text(errno));
  }
}

}  // namespace

void Fd::reset(int fd) {
  if (m_fd >= 0) ::close(m_fd);
  m_fd = fd;
}

Result<Pipe> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return make_error(ErrorCode::internal, "pipe: " + errno_text(errno));
  }
  return Pipe{Fd(fds[0]), Fd(fds[1])};
}

Result<void> set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return make_error(ErrorCode::internal, "fcntl(O_NONBLOCK): " + errno_text(errno));
  }
  return {};
}

Result<Fd> listen_tcp(const std::string& addr, std::uint16_t port, int backlog) {
  auto infos = resolve(addr, port, true, Deadline::after(Millis(10000)));
  if (!infos) return infos.error();
  std::string last_error = "no address";
  // Prefer IPv6 wildcard (dual stack) when binding every interface; otherwise
  // take the first address that binds.
  for (addrinfo* info = infos->get(); info != nullptr; info = info->ai_next) {
    Fd fd(::socket(info->ai_family, info->ai_socktype | SOCK_CLOEXEC, info->ai_protocol));
    if (!fd.valid()) {
      last_error = "socket: " + errno_text(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (info->ai_family == AF_INET6) {
      int zero = 0;
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    }
    if (::bind(fd.get(), info->ai_addr, info->ai_addrlen) != 0) {
      last_error = "bind: " + errno_text(errno);
      continue;
    }
    if (::listen(fd.get(), backlog) != 0) {
      last_error = "listen: " + errno_text(errno);
      continue;
    }
    return fd;
  }
  return make_error(ErrorCode::unavailable,
                    fmt::format("cannot listen on {}: {}",
                                format_endpoint(addr.empty() ? "*" : addr, port), last_error));
}

Result<std::uint16_t> local_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return make_error(ErrorCode::internal, "getsockname: " + errno_text(errno));
  }
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  }
  return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
}

Result<Fd> connect_tcp(const std::string& host, std::uint16_t port, Deadline deadline) {
  auto infos = resolve(host, port, false, deadline);
  if (!infos) return infos.error();
  Error last{ErrorCode::unavailable, "no address"};
  for (addrinfo* info = infos->get(); info != nullptr; info = info->ai_next) {
    Fd fd(::socket(info->ai_family, info->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                   info->ai_protocol));
    if (!fd.valid()) {
      last = make_error(ErrorCode::internal, "socket: " + errno_text(errno));
      continue;
    }
    int rc = ::connect(fd.get(), info->ai_addr, info->ai_addrlen);
    if (rc != 0 && errno != EINPROGRESS) {
      last = make_error(ErrorCode::unavailable, errno_text(errno));
      continue;
    }
    if (rc != 0) {
      auto ready = wait_for(fd.get(), POLLOUT, deadline);
      if (!ready) {
        last = ready.error();
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last = make_error(ErrorCode::unavailable, errno_text(err));
        continue;
      }
    }
    int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
  }
  return last;
}

void enable_keepalive(int fd, int idle_s) {
  int one = 1;
  int interval = idle_s > 1 ? idle_s / 2 : 1;
  int probes = 3;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

Result<void> send_all(int fd, std::string_view bytes, Deadline deadline) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      auto ready = wait_for(fd, POLLOUT, deadline);
      if (!ready) return ready.error();
      continue;
    }
    return make_error(ErrorCode::unavailable, "send: " + errno_text(errno));
  }
  return {};
}

Result<std::string> recv_exact(int fd, std::size_t n, Deadline deadline) {
  std::string out(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    auto ready = wait_for(fd, POLLIN, deadline);
    if (!ready) return ready.error();
    ssize_t r = ::recv(fd, out.data() + got, n - got, 0);
    if (r > 0) {
      got += static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0) return make_error(ErrorCode::unavailable, "connection closed by peer");
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    return make_error(ErrorCode::unavailable, "recv: " + errno_text(errno));
  }
  return out;
}

std::string format_endpoint(const std::string& host, std::uint16_t port) {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

}  // namespace epkit::runtime
