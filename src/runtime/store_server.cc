#include "runtime/store_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <list>
#include <map>
#include <set>
#include <thread>

#include "runtime/auth.h"
#include "runtime/socket.h"
#include "runtime/store_protocol.h"

namespace epkit::runtime {

using wire::Op;

namespace {

// Replies queued for one connection before the server stops reading from it.
constexpr std::size_t k_max_pending_out = 4 * wire::k_max_frame;
// Connections that have not proven the secret yet: per peer address and in
// all. A new one beyond either cap pushes out the oldest (of that peer, or of
// all), so idle or slow strangers can never lock a real node out: a real node
// sends its hello within one round trip of the challenge.
constexpr std::size_t k_max_strangers_per_peer = 8;
constexpr std::size_t k_max_strangers = 64;
// Requests one rank may have waiting at once (a client sends one at a time).
constexpr std::size_t k_max_waiting_per_rank = 4;
// What a key costs the size cap beyond its bytes (the map's node), so that
// many tiny keys cannot grow memory past the cap unseen.
constexpr std::size_t k_key_overhead = 64;
// The refusal a peer gets, whatever the reason: a stranger learns nothing
// about the job (world size, versions, tag). Rank 0 names the reason in its
// own timeout messages instead.
constexpr const char* k_refused = "refused";

// The peer's address without the port: the unit of the per-peer cap.
std::string peer_address(const sockaddr_storage& addr) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, text, sizeof text);
  } else if (addr.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr, text,
                sizeof text);
  }
  return text;
}

std::string reply_frame(const Result<std::string>& result) {
  wire::Writer writer;
  if (result) {
    writer.u8(wire::k_status_ok).str(*result);
  } else {
    writer.u8(static_cast<std::uint8_t>(1 + static_cast<int>(result.error().code)))
        .str(result.error().message);
  }
  return writer.frame();
}

}  // namespace

class StoreServer::Impl {
 public:
  Impl(ServerOptions options, Fd listener, Pipe wake, std::uint16_t port)
      : m_options(std::move(options)),
        m_listener(std::move(listener)),
        m_wake(std::move(wake)),
        m_port(port),
        m_ranks(static_cast<std::size_t>(m_options.world_size)) {}

  ~Impl() {
    m_stop = true;
    char byte = 0;
    [[maybe_unused]] auto n = ::write(m_wake.write.get(), &byte, 1);
    if (m_thread.joinable()) m_thread.join();
  }

  void run_in_background() {
    m_thread = std::thread([this] { loop(); });
  }

  std::uint16_t port() const { return m_port; }

  bool loopback_only() const {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getsockname(m_listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return false;
    }
    if (addr.ss_family == AF_INET) {
      auto ip = ntohl(reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr.s_addr);
      return (ip >> 24) == 127;
    }
    if (addr.ss_family == AF_INET6) {
      const auto& a6 = reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr;
      if (IN6_IS_ADDR_LOOPBACK(&a6)) return true;
      if (IN6_IS_ADDR_V4MAPPED(&a6)) return a6.s6_addr[12] == 127;
    }
    return false;
  }

 private:
  struct Conn {
    Fd fd;
    std::string in;
    std::string out;
    int rank = -1;  // -1 until the hello
    bool bye = false;
    bool closing = false;  // close once `out` is flushed
    Clock::time_point accepted;
    std::string peer;   // the remote address, without the port
    std::string nonce;  // the challenge this connection must answer
    // Requests after the hello: a rank that leaves before its first one
    // gives its rank back (leave(), close_conn()).
    std::uint64_t requests = 0;
  };
  using ConnIt = std::list<Conn>::iterator;

  enum class RankState { never, connected, left, failed };
  struct RankInfo {
    RankState state = RankState::never;
    std::string host;
  };

  enum class WaitKind { get, wait, barrier };
  struct Waiter {
    Conn* conn;
    WaitKind kind;
    std::vector<std::string> keys;  // get: one key; barrier: the name
    Deadline deadline;
    Millis timeout;
  };

  std::string rank_name(int rank) const {
    const auto& info = m_ranks[static_cast<std::size_t>(rank)];
    return info.host.empty() ? fmt::format("rank {}", rank) : fmt::format("{}:{}", info.host, rank);
  }

  // "rank 2 (never connected), host-b:3 (left)"; ranks in `skip` are omitted.
  std::string missing_ranks(const std::set<int>& skip) const {
    std::vector<std::string> parts;
    for (int rank = 0; rank < m_options.world_size; ++rank) {
      if (skip.count(rank)) continue;
      const auto& info = m_ranks[static_cast<std::size_t>(rank)];
      const char* state = info.state == RankState::never    ? "never connected"
                          : info.state == RankState::left   ? "already left"
                          : info.state == RankState::failed ? "lost"
                                                            : "connected";
      parts.push_back(fmt::format("{} ({})", rank_name(rank), state));
    }
    // A message names a few; thousands of ranks would not fit in a reply.
    constexpr std::size_t k_named = 16;
    if (parts.size() > k_named) {
      std::size_t more = parts.size() - k_named;
      parts.resize(k_named);
      parts.push_back(fmt::format("and {} more", more));
    }
    return fmt::format("{}", fmt::join(parts, ", "));
  }

  std::set<int> connected_ranks() const {
    std::set<int> connected;
    for (int rank = 0; rank < m_options.world_size; ++rank) {
      if (m_ranks[static_cast<std::size_t>(rank)].state == RankState::connected) {
        connected.insert(rank);
      }
    }
    return connected;
  }

  void send(Conn& conn, const Result<std::string>& result) { conn.out += reply_frame(result); }

  void protocol_error(Conn& conn, std::string message) {
    send(conn, make_error(ErrorCode::invalid, message));
    conn.closing = true;
    if (conn.rank >= 0 && conn.requests == 0) {
      // Garbage as its very first request: nothing depends on this rank yet
      // (a stranger in a job without a secret); it is given back, as when a
      // rank leaves before asking anything.
      m_ranks[static_cast<std::size_t>(conn.rank)] = RankInfo{};
      conn.rank = -1;
      return;
    }
    if (conn.rank >= 0) {
      fail_rank(conn.rank,
                fmt::format("{} sent a malformed request: {}", rank_name(conn.rank), message));
    }
  }

  // A rank is gone without a goodbye: everyone waiting learns who.
  void fail_rank(int rank, std::string reason) {
    auto& info = m_ranks[static_cast<std::size_t>(rank)];
    if (info.state != RankState::connected) return;
    info.state = RankState::failed;
    if (!m_failure) m_failure = reason;
    auto waiters = std::move(m_waiters);
    m_waiters.clear();
    for (auto& waiter : waiters) {
      if (waiter.conn->rank == rank) continue;
      send(*waiter.conn, make_error(ErrorCode::unavailable, *m_failure));
    }
    m_barriers.clear();
  }

  // ------------------------------------------------------------ requests

  // Every refusal says only "refused" to the peer; rank 0 keeps the reason
  // for its own messages (a rank of another NCCL, for instance).
  void refuse(Conn& conn, std::string reason) {
    ++m_refusals;
    m_last_refusal = std::move(reason);
    send(conn, make_error(ErrorCode::invalid, k_refused));
    conn.closing = true;
  }

  void handle_hello(Conn& conn, std::string_view payload) {
    std::string_view signed_part;
    auto hello = wire::parse_hello(payload, &signed_part);
    if (!hello) {
      return refuse(conn, fmt::format("a malformed hello from {}", conn.peer));
    }
    // The proof first: nothing else is looked at for a peer without the secret.
    if (!same_mac(hello->mac, wire::hello_mac(m_options.secret, conn.nonce, signed_part))) {
      return refuse(conn, fmt::format("a hello from {} without the job's secret", conn.peer));
    }
    const auto& host = hello->host;
    auto rank = hello->rank;
    if (hello->protocol != wire::k_protocol_version) {
      return refuse(conn, fmt::format("{}:{} speaks store protocol {}, rank 0 speaks {}", host,
                                      rank, hello->protocol, wire::k_protocol_version));
    }
    if (hello->world != static_cast<std::uint32_t>(m_options.world_size)) {
      return refuse(conn, fmt::format("{}:{} believes the world has {} ranks, rank 0 says {}", host,
                                      rank, hello->world, m_options.world_size));
    }
    if (rank >= hello->world) {
      return refuse(
          conn, fmt::format("{}: rank {} is not below world size {}", host, rank, hello->world));
    }
    if (hello->epkit != m_options.epkit_version) {
      return refuse(conn, fmt::format("{}:{} runs epkit {}, rank 0 runs epkit {}", host, rank,
                                      hello->epkit, m_options.epkit_version));
    }
    if (hello->tag != m_options.tag) {
      return refuse(conn, fmt::format("{}:{} reports '{}', rank 0 reports '{}'", host, rank,
                                      hello->tag, m_options.tag));
    }
    auto& info = m_ranks[rank];
    if (info.state == RankState::connected) {
      return refuse(
          conn, fmt::format("rank {} joined twice: from {} and from {}", rank, info.host, host));
    }
    if (info.state != RankState::never) {
      return refuse(conn, fmt::format("{}:{} rejoined after it {}", host, rank,
                                      info.state == RankState::left ? "left" : "was lost"));
    }
    info.state = RankState::connected;
    info.host = host;
    conn.rank = static_cast<int>(rank);
    send(conn, wire::welcome_mac(m_options.secret, conn.nonce, hello->nonce));
  }

  bool all_present(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return m_kv.count(k) > 0; });
  }

  // A counter's new value, or why there is none: not a counter, an
  // overflow, or the size cap.
  Result<std::string> add(const std::string& key, std::int64_t delta) {
    std::int64_t value = 0;
    auto it = m_kv.find(key);
    if (it != m_kv.end()) {
      const auto& text = it->second;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (ec != std::errc() || end != text.data() + text.size()) {
        return make_error(ErrorCode::invalid, fmt::format("key '{}' is not a counter", key));
      }
    }
    if (__builtin_add_overflow(value, delta, &value)) {
      return make_error(ErrorCode::invalid,
                        fmt::format("counter '{}' would overflow a 64-bit integer", key));
    }
    std::string text = std::to_string(value);
    EPKIT_TRY(store(key, text));
    return text;
  }

  // Sets key to value within the size cap (keys, values and a node's cost).
  Result<void> store(const std::string& key, std::string value) {
    auto it = m_kv.find(key);
    std::size_t old = it != m_kv.end() ? key.size() + it->second.size() + k_key_overhead : 0;
    std::size_t now = key.size() + value.size() + k_key_overhead;
    if (m_bytes - old + now > m_options.max_bytes) {
      return make_error(
          ErrorCode::invalid,
          fmt::format("store full: more than {} bytes of keys and values", m_options.max_bytes));
    }
    m_bytes = m_bytes - old + now;
    if (it != m_kv.end()) {
      it->second = std::move(value);
    } else {
      m_kv.emplace(key, std::move(value));
    }
    return {};
  }

  void handle_request(Conn& conn, std::string_view payload) {
    if (conn.rank < 0) return handle_hello(conn, payload);
    auto request = wire::parse_request(payload);
    if (!request) return protocol_error(conn, request.error().message);
    ++conn.requests;
    switch (request->op) {
      case Op::set: {
        if (m_failure) return send(conn, make_error(ErrorCode::unavailable, *m_failure));
        auto stored = store(request->key, std::move(request->value));
        if (!stored) return send(conn, stored.error());
        send(conn, std::string());
        return wake_waiters();
      }
      case Op::add: {
        if (m_failure) return send(conn, make_error(ErrorCode::unavailable, *m_failure));
        auto value = add(request->key, request->delta);
        send(conn, value);
        if (value) wake_waiters();
        return;
      }
      case Op::get:
      case Op::wait:
      case Op::barrier:
        return handle_wait(conn, std::move(*request));
      case Op::bye:
        conn.bye = true;
        leave(conn);
        send(conn, std::string());
        conn.closing = true;
        return;
      case Op::hello:
        break;  // parse_request refuses a second hello
    }
    protocol_error(conn, "unexpected request");
  }

  // A rank that said goodbye. One that never made a request is given back
  // (state never): a stranger in a job without a secret could otherwise
  // claim a free rank and leave, and the real node would be refused.
  void leave(Conn& conn) {
    auto& info = m_ranks[static_cast<std::size_t>(conn.rank)];
    if (conn.requests <= 1) {
      info = RankInfo{};
    } else {
      info.state = RankState::left;
    }
  }

  void handle_wait(Conn& conn, wire::Request request) {
    auto waiting = std::count_if(m_waiters.begin(), m_waiters.end(),
                                 [&](const Waiter& w) { return w.conn == &conn; });
    if (static_cast<std::size_t>(waiting) >= k_max_waiting_per_rank) {
      return send(conn, make_error(ErrorCode::invalid,
                                   fmt::format("more than {} requests waiting from one rank",
                                               k_max_waiting_per_rank)));
    }
    Waiter waiter{&conn, WaitKind::get, {}, Deadline(Clock::now()), Millis(0)};
    if (request.op == Op::wait) {
      waiter.kind = WaitKind::wait;
      waiter.keys = std::move(request.keys);
    } else {
      waiter.kind = request.op == Op::get ? WaitKind::get : WaitKind::barrier;
      waiter.keys.push_back(std::move(request.key));
    }
    waiter.timeout = Millis(request.timeout_ms);
    waiter.deadline = Deadline::after(waiter.timeout);
    if (m_failure) return send(conn, make_error(ErrorCode::unavailable, *m_failure));
    if (waiter.kind == WaitKind::barrier) {
      auto& barrier = m_barriers[waiter.keys.front()];
      barrier.waiting.insert(conn.rank);
      barrier.seen.insert(conn.rank);
      if (static_cast<int>(barrier.waiting.size()) == m_options.world_size) {
        m_barriers.erase(waiter.keys.front());
        send(conn, std::string());
        release_barrier(waiter.keys.front());
        return;
      }
      m_waiters.push_back(std::move(waiter));
      return;
    }
    if (all_present(waiter.keys)) return send(conn, reply_value(waiter));
    m_waiters.push_back(std::move(waiter));
  }

  std::string reply_value(const Waiter& waiter) const {
    return waiter.kind == WaitKind::get ? m_kv.at(waiter.keys.front()) : std::string();
  }

  void release_barrier(const std::string& name) {
    for (auto it = m_waiters.begin(); it != m_waiters.end();) {
      if (it->kind == WaitKind::barrier && it->keys.front() == name) {
        send(*it->conn, std::string());
        it = m_waiters.erase(it);
      } else {
        ++it;
      }
    }
  }

  void wake_waiters() {
    for (auto it = m_waiters.begin(); it != m_waiters.end();) {
      if (it->kind != WaitKind::barrier && all_present(it->keys)) {
        send(*it->conn, reply_value(*it));
        it = m_waiters.erase(it);
      } else {
        ++it;
      }
    }
  }

  void expire_waiters() {
    for (auto it = m_waiters.begin(); it != m_waiters.end();) {
      if (!it->deadline.expired()) {
        ++it;
        continue;
      }
      std::string message;
      if (it->kind == WaitKind::barrier) {
        // Ranks that entered and then gave up are not the ones to blame.
        auto& barrier = m_barriers[it->keys.front()];
        message =
            fmt::format("barrier '{}' timed out after {}: still waiting for {}", it->keys.front(),
                        seconds_text(it->timeout), missing_ranks(barrier.seen));
        barrier.waiting.erase(it->conn->rank);
        if (barrier.waiting.empty()) m_barriers.erase(it->keys.front());
      } else {
        std::vector<std::string> absent;
        for (const auto& key : it->keys) {
          if (!m_kv.count(key)) absent.push_back("'" + key + "'");
        }
        auto connected = connected_ranks();
        message = fmt::format("key {} not set within {}", fmt::join(absent, ", "),
                              seconds_text(it->timeout));
        if (static_cast<int>(connected.size()) < m_options.world_size) {
          message += fmt::format("; not connected: {}", missing_ranks(connected));
        }
      }
      if (m_refusals > 0) {
        message += fmt::format("; the store refused {} connection{} (last: {})", m_refusals,
                               m_refusals == 1 ? "" : "s", m_last_refusal);
      }
      send(*it->conn, make_error(ErrorCode::timeout, message));
      it = m_waiters.erase(it);
    }
  }

  // ------------------------------------------------------------ I/O

  void drop_waiters_of(const Conn* conn) {
    m_waiters.erase(std::remove_if(m_waiters.begin(), m_waiters.end(),
                                   [&](const Waiter& w) { return w.conn == conn; }),
                    m_waiters.end());
    for (auto& [name, barrier] : m_barriers) barrier.waiting.erase(conn->rank);
  }

  void close_conn(ConnIt it, std::string_view why) {
    drop_waiters_of(&*it);
    if (it->rank >= 0 && !it->bye) {
      if (it->requests == 0) {
        // Gone before asking anything: nothing depends on it yet, and a
        // stranger (in a job without a secret) must not fail the group by
        // claiming a free rank and leaving. The rank is free again.
        m_ranks[static_cast<std::size_t>(it->rank)] = RankInfo{};
      } else {
        fail_rank(it->rank,
                  fmt::format("{} disconnected ({}) before it finished", rank_name(it->rank), why));
      }
    }
    m_conns.erase(it);
  }

  void read_from(ConnIt it) {
    Conn& conn = *it;
    // Pushed out or refused: it is closed after this round, unread.
    if (conn.closing) return;
    char buffer[65536];
    for (;;) {
      // A client that sends without reading its replies is not read further
      // until they drain (poll stops asking for POLLIN meanwhile).
      if (conn.out.size() > k_max_pending_out) return;
      ssize_t n = ::recv(conn.fd.get(), buffer, sizeof buffer, 0);
      if (n > 0) {
        conn.in.append(buffer, static_cast<std::size_t>(n));
        parse_frames(conn);
        if (conn.closing) return;
        continue;
      }
      if (n == 0) return close_conn(it, "connection closed");
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      return close_conn(it, std::strerror(errno));
    }
  }

  void parse_frames(Conn& conn) {
    while (!conn.closing && conn.in.size() >= 4) {
      // A stranger's frames are bounded far lower than a rank's.
      auto len = wire::frame_length(std::string_view(conn.in).substr(0, 4),
                                    conn.rank < 0 ? wire::k_max_hello_frame : wire::k_max_frame);
      if (!len) return protocol_error(conn, len.error().message);
      if (conn.in.size() < 4 + *len) return;
      std::string payload = conn.in.substr(4, *len);
      conn.in.erase(0, 4 + *len);
      handle_request(conn, payload);
    }
  }

  // Returns false when the connection was closed.
  bool flush(ConnIt it) {
    Conn& conn = *it;
    while (!conn.out.empty()) {
      ssize_t n = ::send(conn.fd.get(), conn.out.data(), conn.out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        conn.out.erase(0, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      close_conn(it, std::strerror(errno));
      return false;
    }
    if (conn.closing) {
      // The reply is out; a protocol or handshake failure needs no more.
      if (conn.rank >= 0 && !conn.bye) conn.bye = true;  // already reported if it was a rank
      close_conn(it, "closed by the store");
      return false;
    }
    return true;
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      int fd = ::accept4(m_listener.get(), reinterpret_cast<sockaddr*>(&addr), &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN or a transient error: poll again
      Fd owned(fd);
      auto nonce = random_bytes(k_nonce_bytes);
      if (!nonce) continue;
      Conn conn;
      conn.fd = std::move(owned);
      conn.accepted = Clock::now();
      conn.peer = peer_address(addr);
      conn.nonce = std::move(*nonce);
      make_room_for(conn.peer);
      enable_keepalive(fd, m_options.keepalive_idle_s);
      // The server speaks first: the nonce the hello must prove the secret over.
      conn.out = wire::challenge_frame(conn.nonce);
      m_conns.push_back(std::move(conn));
    }
  }

  // Pushes out the oldest stranger of `peer` (or of all) when a new one would
  // pass a cap. Marked closing with nothing to send: the loop closes it after
  // this round (iterators into m_conns stay valid until then).
  void make_room_for(const std::string& peer) {
    std::size_t all = 0;
    std::size_t mine = 0;
    ConnIt oldest_all = m_conns.end();
    ConnIt oldest_mine = m_conns.end();
    for (auto it = m_conns.begin(); it != m_conns.end(); ++it) {
      if (it->rank >= 0 || it->closing) continue;
      ++all;
      if (oldest_all == m_conns.end()) oldest_all = it;
      if (it->peer == peer) {
        ++mine;
        if (oldest_mine == m_conns.end()) oldest_mine = it;
      }
    }
    ConnIt victim = mine >= k_max_strangers_per_peer ? oldest_mine
                    : all >= k_max_strangers         ? oldest_all
                                                     : m_conns.end();
    if (victim == m_conns.end()) return;
    victim->out.clear();
    victim->in.clear();
    victim->closing = true;
  }

  int poll_timeout_ms() const {
    Deadline next = Deadline::after(Millis(1000));
    for (const auto& waiter : m_waiters) next = next.min(waiter.deadline);
    for (const auto& conn : m_conns) {
      if (conn.rank < 0 && !conn.closing) {
        next = next.min(Deadline(conn.accepted + m_options.handshake_timeout));
      }
    }
    return next.poll_ms();
  }

  void loop() {
    std::vector<pollfd> fds;
    std::vector<ConnIt> order;
    while (!m_stop) {
      fds.clear();
      order.clear();
      fds.push_back({m_wake.read.get(), POLLIN, 0});
      fds.push_back({m_listener.get(), POLLIN, 0});
      for (auto it = m_conns.begin(); it != m_conns.end(); ++it) {
        // A closing connection is not read (its reply drains, then it goes).
        short events = it->closing || it->out.size() > k_max_pending_out ? 0 : POLLIN;
        if (!it->out.empty()) events |= POLLOUT;
        fds.push_back({it->fd.get(), events, 0});
        order.push_back(it);
      }
      int rc = ::poll(fds.data(), fds.size(), poll_timeout_ms());
      if (rc < 0 && errno != EINTR) break;
      if (m_stop) break;
      if (rc > 0 && (fds[1].revents & POLLIN)) accept_all();
      for (std::size_t i = 0; i < order.size(); ++i) {
        short revents = fds[i + 2].revents;
        if (revents == 0) continue;
        ConnIt it = order[i];
        if (revents & (POLLIN | POLLERR | POLLHUP)) {
          auto before = m_conns.size();
          read_from(it);
          if (m_conns.size() < before) {
            // `it` may be gone; the other iterators in `order` stay valid
            // (std::list), except that one.
            order[i] = m_conns.end();
            continue;
          }
        }
      }
      expire_waiters();
      expire_handshakes();
      for (auto it = m_conns.begin(); it != m_conns.end();) {
        auto next = std::next(it);
        flush(it);
        it = next;
      }
    }
  }

  void expire_handshakes() {
    auto now = Clock::now();
    for (auto it = m_conns.begin(); it != m_conns.end();) {
      auto next = std::next(it);
      // A stranger that does not even read its refusal is dropped unread.
      if (it->rank < 0 && it->closing && now - it->accepted > 2 * m_options.handshake_timeout) {
        close_conn(it, "refusal not read");
        it = next;
        continue;
      }
      if (it->rank < 0 && !it->closing && now - it->accepted > m_options.handshake_timeout) {
        send(*it, make_error(ErrorCode::timeout, "no hello within the handshake timeout"));
        it->closing = true;
      }
      it = next;
    }
  }

  ServerOptions m_options;
  Fd m_listener;
  Pipe m_wake;
  std::uint16_t m_port;
  std::thread m_thread;
  std::atomic<bool> m_stop{false};

  std::list<Conn> m_conns;
  std::vector<RankInfo> m_ranks;
  std::vector<Waiter> m_waiters;
  struct Barrier {
    std::set<int> waiting;  // ranks blocked in it now
    std::set<int> seen;     // ranks that entered it since it last completed
  };
  std::map<std::string, Barrier> m_barriers;
  std::map<std::string, std::string> m_kv;
  std::size_t m_bytes = 0;
  std::optional<std::string> m_failure;
  std::uint64_t m_refusals = 0;
  std::string m_last_refusal;
};

Result<std::unique_ptr<StoreServer>> StoreServer::start(const ServerOptions& options) {
  if (options.world_size < 1 || options.world_size > k_max_world_size) {
    return make_error(ErrorCode::invalid, fmt::format("store: world size {} is not 1..{}",
                                                      options.world_size, k_max_world_size));
  }
  auto listener = listen_tcp(options.bind_addr, options.port);
  if (!listener) return listener.error();
  if (auto nb = set_nonblocking(listener->get()); !nb) return nb.error();
  auto port = local_port(listener->get());
  if (!port) return port.error();
  auto wake = make_pipe();
  if (!wake) return wake.error();
  auto impl = std::make_unique<Impl>(options, std::move(*listener), std::move(*wake), *port);
  impl->run_in_background();
  return std::unique_ptr<StoreServer>(new StoreServer(std::move(impl)));
}

StoreServer::StoreServer(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
StoreServer::~StoreServer() = default;
std::uint16_t StoreServer::port() const {
  return m_impl->port();
}
bool StoreServer::loopback_only() const {
  return m_impl->loopback_only();
}

}  // namespace epkit::runtime
