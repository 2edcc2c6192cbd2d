#include "runtime/store_client.h"

#include <fmt/format.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <thread>

#include "runtime/auth.h"
#include "runtime/store_protocol.h"
#include "runtime/store_server.h"  // k_max_world_size: the client refuses what no server serves

namespace epkit::runtime {

using wire::Op;

namespace {

// The server gives up on a waiting request a little before the client does,
// so the client receives the server's explanation (which ranks are missing)
// rather than a bare timeout of its own.
std::uint32_t server_timeout_ms(Deadline deadline) {
  auto left = deadline.remaining().count();
  // A tenth of the budget, at least a little (half of a short one), at most 250 ms.
  auto grace = std::min<std::int64_t>(
      250, std::max<std::int64_t>(left / 10, std::min<std::int64_t>(left / 2, 50)));
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(left - grace, 0, 0x7fffffff));
}

// Checked before sending: the server would take an oversized request for a
// broken client and fail the whole group.
Result<void> check_request(const std::string& key, std::size_t value_size = 0) {
  if (key.size() > wire::k_max_key) {
    return make_error(ErrorCode::invalid,
                      fmt::format("store key of {} bytes exceeds {}", key.size(), wire::k_max_key));
  }
  if (value_size > wire::k_max_frame - wire::k_max_key - 16) {
    return make_error(ErrorCode::invalid,
                      fmt::format("store value of {} bytes exceeds {}", value_size,
                                  wire::k_max_frame - wire::k_max_key - 16));
  }
  return {};
}

}  // namespace

namespace {

// One frame's payload from the server, bounded by the deadline.
Result<std::string> recv_frame(int fd, Deadline deadline) {
  auto header = recv_exact(fd, 4, deadline);
  if (!header) return header.error();
  auto len = wire::frame_length(*header);
  if (!len) return len.error();
  return recv_exact(fd, *len, deadline);
}

// What this rank calls itself in the hello: the server accepts address
// characters only, so anything else in a host name becomes '_'.
std::string hello_host(const std::string& host) {
  std::string out = host.substr(0, wire::k_max_host);
  for (auto& c : out) {
    if (!wire::valid_host(std::string_view(&c, 1))) c = '_';
  }
  return out.empty() ? "unknown" : out;
}

}  // namespace

Result<void> Store::handshake(const ClientOptions& options, Deadline deadline) {
  // A peer that accepts but never speaks is not a store: one attempt waits
  // for the challenge a few seconds at most, then the caller retries.
  auto payload = recv_frame(m_fd.get(), deadline.min(Deadline::after(Millis(5000))));
  if (!payload) {
    return make_error(
        payload.error().code == ErrorCode::invalid ? ErrorCode::invalid : ErrorCode::unavailable,
        fmt::format("no challenge from {}: {}", m_endpoint, payload.error().message));
  }
  auto challenge = wire::parse_challenge(*payload);
  if (!challenge) {
    return make_error(ErrorCode::invalid, fmt::format("{} is not an epkit store ({})", m_endpoint,
                                                      challenge.error().message));
  }
  if (challenge->protocol != wire::k_protocol_version) {
    return make_error(ErrorCode::invalid,
                      fmt::format("the store at {} speaks store protocol {}, this epkit speaks {} "
                                  "(run one epkit version on every node)",
                                  m_endpoint, challenge->protocol, wire::k_protocol_version));
  }
  auto nonce = random_bytes(k_nonce_bytes);
  if (!nonce) return nonce.error();
  wire::Hello hello;
  hello.rank = static_cast<std::uint32_t>(options.rank);
  hello.world = static_cast<std::uint32_t>(options.world_size);
  hello.host = hello_host(options.my_host);
  hello.epkit = options.epkit_version;
  hello.tag = options.tag;
  hello.nonce = *nonce;
  auto reply = request(wire::hello_frame(hello, options.secret, challenge->nonce), deadline, false);
  if (!reply) {
    if (reply.error().code != ErrorCode::invalid) return reply.error();
    // The store says only "refused"; this side names what must agree.
    return make_error(
        ErrorCode::invalid,
        fmt::format(
            "the store at {} refused rank {} of {}: every rank must hold the job's secret "
            "({}), run epkit {} with '{}', agree on the world size, and take a rank no "
            "other process holds (rank 0's own timeout message names the reason)",
            m_endpoint, options.rank, options.world_size,
            options.secret.empty() ? "this one has none" : "EPKIT_SECRET_FILE or EPKIT_SECRET",
            options.epkit_version, options.tag));
  }
  if (!same_mac(*reply, wire::welcome_mac(options.secret, challenge->nonce, hello.nonce))) {
    m_broken = make_error(ErrorCode::invalid, "store did not prove the secret");
    m_fd.reset();
    return make_error(ErrorCode::invalid,
                      fmt::format("the service at {} did not prove the job's secret: another "
                                  "program on that port, or a store with another secret",
                                  m_endpoint));
  }
  return {};
}

Result<Store> Store::connect(const ClientOptions& options, Deadline deadline) {
  std::string endpoint = format_endpoint(options.host, options.port);
  if (options.rank < 0 || options.world_size < 1 || options.world_size > k_max_world_size ||
      options.rank >= options.world_size) {
    return make_error(ErrorCode::invalid, fmt::format("store: rank {} of world size {}",
                                                      options.rank, options.world_size));
  }
  if (!wire::printable_ascii(options.tag) || options.tag.size() > wire::k_max_tag ||
      !wire::printable_ascii(options.epkit_version) ||
      options.epkit_version.size() > wire::k_max_version) {
    return make_error(ErrorCode::invalid,
                      "store: the handshake's tag or version holds characters other than "
                      "printable ASCII, or is too long");
  }
  Millis backoff = options.first_backoff;
  Error last{ErrorCode::unavailable, "no attempt"};
  int attempts = 0;
  auto started = Clock::now();
  for (;;) {
    ++attempts;
    // One attempt may not use all the time: a SYN lost to a firewall would
    // otherwise eat the whole deadline in one go.
    auto fd = connect_tcp(options.host, options.port, deadline.min(Deadline::after(Millis(2000))));
    if (fd) {
      enable_keepalive(fd->get(), options.keepalive_idle_s);
      Store store(std::move(*fd), options.rank, endpoint);
      auto shook = store.handshake(options, deadline);
      if (shook) return store;
      if (shook.error().code == ErrorCode::invalid) return shook.error();
      last = shook.error();
    } else {
      // Retried whatever the cause: in Kubernetes the master's DNS name
      // appears only once its pod is up.
      last = fd.error();
    }
    if (deadline.remaining() <= Millis(0)) break;
    std::this_thread::sleep_for(std::min(backoff, deadline.remaining()));
    backoff = std::min(backoff * 2, options.max_backoff);
    if (deadline.expired()) break;
  }
  auto waited = std::chrono::duration_cast<Millis>(Clock::now() - started);
  return make_error(
      ErrorCode::timeout,
      fmt::format("rank {} could not reach the store of rank 0 at {} within {} "
                  "({} attempts; last: {}); is rank 0 running and the port open?",
                  options.rank, endpoint, seconds_text(waited), attempts, last.message));
}

Store::~Store() = default;

Result<std::string> Store::request(const std::string& frame, Deadline deadline, bool waits) {
  std::lock_guard lock(*m_mutex);
  if (m_broken) return *m_broken;
  if (deadline.expired()) {
    // Nothing sent, so the connection stays usable.
    return make_error(ErrorCode::timeout, "store call made with its deadline already passed");
  }
  auto broken = [&](Error error) -> Result<std::string> {
    m_broken = error;
    m_fd.reset();
    return error;
  };
  if (auto sent = send_all(m_fd.get(), frame, deadline); !sent) {
    return broken(make_error(
        sent.error().code == ErrorCode::timeout ? ErrorCode::timeout : ErrorCode::unavailable,
        fmt::format("lost the store at {} (rank 0): {}", m_endpoint, sent.error().message)));
  }
  auto payload = recv_frame(m_fd.get(), deadline);
  if (!payload) {
    const auto& error = payload.error();
    if (error.code == ErrorCode::timeout) {
      return broken(make_error(ErrorCode::timeout,
                               fmt::format("no answer from the store at {} before the deadline{}",
                                           m_endpoint, waits ? "" : " (rank 0 stuck?)")));
    }
    return broken(
        make_error(error.code == ErrorCode::invalid ? ErrorCode::invalid : ErrorCode::unavailable,
                   fmt::format("lost the store at {} (rank 0 exited or its node is "
                               "unreachable): {}",
                               m_endpoint, error.message)));
  }
  auto reply = wire::parse_reply(*payload);
  if (!reply) {
    return broken(make_error(ErrorCode::invalid,
                             fmt::format("malformed reply from the store at {}", m_endpoint)));
  }
  if (reply->status == wire::k_status_ok) return std::move(reply->body);
  Error error{static_cast<ErrorCode>(reply->status - 1), std::move(reply->body)};
  // A failed rank poisons the group; a timed-out wait leaves the stream in
  // step and the caller may decide.
  if (error.code == ErrorCode::unavailable) m_broken = error;
  return error;
}

Result<void> Store::set(const std::string& key, std::string_view value, Deadline deadline) {
  EPKIT_TRY(check_request(key, value.size()));
  auto reply = request(wire::Writer(Op::set).str(key).str(value).frame(), deadline, false);
  if (!reply) return reply.error();
  return {};
}

Result<std::string> Store::get(const std::string& key, Deadline deadline) {
  EPKIT_TRY(check_request(key));
  return request(wire::Writer(Op::get).str(key).u32(server_timeout_ms(deadline)).frame(), deadline,
                 true);
}

Result<void> Store::wait(const std::vector<std::string>& keys, Deadline deadline) {
  if (keys.size() > 512) {
    return make_error(ErrorCode::invalid, fmt::format("wait on {} keys; at most 512", keys.size()));
  }
  for (const auto& key : keys) EPKIT_TRY(check_request(key));
  wire::Writer writer(Op::wait);
  writer.u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& key : keys) writer.str(key);
  writer.u32(server_timeout_ms(deadline));
  auto reply = request(writer.frame(), deadline, true);
  if (!reply) return reply.error();
  return {};
}

Result<std::int64_t> Store::add(const std::string& key, std::int64_t delta, Deadline deadline) {
  EPKIT_TRY(check_request(key));
  auto reply = request(wire::Writer(Op::add).str(key).i64(delta).frame(), deadline, false);
  if (!reply) return reply.error();
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(reply->data(), reply->data() + reply->size(), value);
  if (ec != std::errc() || end != reply->data() + reply->size()) {
    return make_error(ErrorCode::invalid, "the store answered a non-number to add");
  }
  return value;
}

Result<void> Store::barrier(const std::string& name, Deadline deadline) {
  EPKIT_TRY(check_request(name));
  auto reply = request(wire::Writer(Op::barrier).str(name).u32(server_timeout_ms(deadline)).frame(),
                       deadline, true);
  if (!reply) return reply.error();
  return {};
}

void Store::close() {
  if (!m_mutex || !m_fd.valid()) return;
  [[maybe_unused]] auto reply =
      request(wire::Writer(Op::bye).frame(), Deadline::after(Millis(1000)), false);
  std::lock_guard lock(*m_mutex);
  m_fd.reset();
  if (!m_broken) m_broken = make_error(ErrorCode::unavailable, "store connection closed");
}

}  // namespace epkit::runtime
