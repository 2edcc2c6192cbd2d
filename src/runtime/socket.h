// Small POSIX socket layer for the rendezvous store: an RAII descriptor and
// blocking-with-deadline helpers built on poll(). Nothing here waits past the
// deadline it is given.
#pragma once

#include <epkit/result.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/deadline.h"

namespace epkit::runtime {

/// Owns one file descriptor; closes it once.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : m_fd(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : m_fd(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return m_fd; }
  bool valid() const { return m_fd >= 0; }
  int release() {
    int fd = m_fd;
    m_fd = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int m_fd = -1;
};

/// A pipe's two ends, both close-on-exec.
struct Pipe {
  Fd read;
  Fd write;
};
Result<Pipe> make_pipe();

Result<void> set_nonblocking(int fd);

/// Listens on addr:port (addr "" = every interface, port 0 = ephemeral).
Result<Fd> listen_tcp(const std::string& addr, std::uint16_t port, int backlog = 128);
/// The local port a listening socket got.
Result<std::uint16_t> local_port(int fd);

/// One connection attempt to host:port, bounded by the deadline (the name
/// lookup included). The error says whether the name did not resolve, the
/// peer refused, or time ran out.
Result<Fd> connect_tcp(const std::string& host, std::uint16_t port, Deadline deadline);

/// Turns on TCP keepalive with short probes, so that a peer whose host
/// vanished (no FIN ever arrives) is noticed within about idle_s + 3 probes.
void enable_keepalive(int fd, int idle_s);

/// Writes all bytes before the deadline (the fd may be non-blocking).
Result<void> send_all(int fd, std::string_view bytes, Deadline deadline);
/// Reads exactly n bytes before the deadline; a closed peer is unavailable.
Result<std::string> recv_exact(int fd, std::size_t n, Deadline deadline);

/// "host:port", with brackets around IPv6 literals.
std::string format_endpoint(const std::string& host, std::uint16_t port);

}  // namespace epkit::runtime
