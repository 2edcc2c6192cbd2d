#include "runtime/store.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <thread>

#include "runtime/auth.h"
#include "runtime/facts.h"
#include "runtime/store_protocol.h"

namespace epkit::runtime {
namespace {

using namespace std::chrono_literals;

// Everything a pipe delivers until EOF or the deadline.
std::string read_until_eof(int fd, Deadline deadline) {
  std::string text;
  char buffer[4096];
  for (;;) {
    pollfd entry{fd, POLLIN, 0};
    if (::poll(&entry, 1, deadline.poll_ms()) <= 0) break;
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

// A forked child that dies with the test and is always reaped.
class Child {
 public:
  explicit Child(std::function<void()> body) {
    m_pid = ::fork();
    if (m_pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      body();
      ::_exit(0);
    }
  }
  ~Child() {
    if (m_pid > 0) {
      ::kill(m_pid, SIGKILL);
      ::waitpid(m_pid, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  void kill_now() const { ::kill(m_pid, SIGKILL); }

 private:
  pid_t m_pid = -1;
};

// A rank in a forked process. It waits for the store's port on a pipe (so
// the server thread starts only after every fork), runs its body and sends
// back "OK" or the error text.
class ForkedRank {
 public:
  explicit ForkedRank(std::function<std::string(std::uint16_t port)> body) {
    auto in = make_pipe();
    auto out = make_pipe();
    if (!in || !out) throw std::runtime_error("pipe");
    m_child = std::make_unique<Child>([&] {
      in->write.reset();
      out->read.reset();
      auto bytes = recv_port(in->read.get());
      std::string result = bytes ? body(*bytes) : "no port";
      [[maybe_unused]] auto n = ::write(out->write.get(), result.data(), result.size());
    });
    m_port_out = std::move(in->write);
    m_result_in = std::move(out->read);
  }

  void give_port(std::uint16_t port) {
    char bytes[2] = {static_cast<char>(port >> 8), static_cast<char>(port & 0xff)};
    [[maybe_unused]] auto n = ::write(m_port_out.get(), bytes, 2);
  }
  void kill_now() { m_child->kill_now(); }
  /// The child's report, or "(no report)" when it died or overran.
  std::string result(Deadline deadline) {
    std::string text = read_until_eof(m_result_in.get(), deadline);
    return text.empty() ? "(no report)" : text;
  }

 private:
  static std::optional<std::uint16_t> recv_port(int fd) {
    char bytes[2];
    if (::read(fd, bytes, 2) != 2) return std::nullopt;
    return static_cast<std::uint16_t>((static_cast<unsigned char>(bytes[0]) << 8) |
                                      static_cast<unsigned char>(bytes[1]));
  }
  std::unique_ptr<Child> m_child;
  Fd m_port_out;
  Fd m_result_in;
};

// A port nobody listens on right now (bound once, then released).
std::uint16_t free_port() {
  auto probe = listen_tcp("127.0.0.1", 0);
  return probe ? local_port(probe->get()).value_or(0) : 0;
}

ClientOptions client_options(std::uint16_t port, int rank, int world) {
  ClientOptions options;
  options.port = port;
  options.rank = rank;
  options.world_size = world;
  options.my_host = "host" + std::to_string(rank);
  options.tag = "nccl 2.21.5";
  return options;
}

std::unique_ptr<StoreServer> start_server(int world) {
  ServerOptions options;
  options.bind_addr = "127.0.0.1";
  options.world_size = world;
  options.tag = "nccl 2.21.5";
  options.handshake_timeout = 1500ms;
  auto server = StoreServer::start(options);
  if (!server) throw std::runtime_error(server.error().message);
  return std::move(*server);
}

std::string describe(const Error& error) {
  return std::string(to_string(error.code)) + ": " + error.message;
}

template <typename T>
std::string check(const Result<T>& result) {
  return result ? "" : describe(result.error());
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Every rank publishes a value, reads everyone's, counts and meets twice.
std::string exchange(std::uint16_t port, int rank, int world) {
  auto deadline = Deadline::after(5s);
  auto store = Store::connect(client_options(port, rank, world), deadline);
  if (!store) return describe(store.error());
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back("facts/" + std::to_string(r));
  if (auto e = check(store->set(keys[rank], std::to_string(rank * rank), deadline)); !e.empty())
    return e;
  if (auto e = check(store->wait(keys, deadline)); !e.empty()) return e;
  for (int r = 0; r < world; ++r) {
    auto value = store->get(keys[r], deadline);
    if (!value || *value != std::to_string(r * r)) return "bad value for " + keys[r];
  }
  if (auto e = check(store->add("count", 1, deadline)); !e.empty()) return e;
  if (auto e = check(store->barrier("after-add", deadline)); !e.empty()) return e;
  auto count = store->add("count", 0, deadline);
  if (!count || *count != world) return "count " + check(count);
  if (auto e = check(store->barrier("after-add", deadline)); !e.empty()) return "reuse " + e;
  store->close();
  return "OK";
}

TEST(Store, SeveralProcessesExchangeKeysCountAndMeet) {
  constexpr int world = 4;
  std::vector<std::unique_ptr<ForkedRank>> ranks;
  for (int r = 1; r < world; ++r) {
    ranks.push_back(
        std::make_unique<ForkedRank>([r](std::uint16_t port) { return exchange(port, r, world); }));
  }
  auto server = start_server(world);
  for (auto& rank : ranks) rank->give_port(server->port());
  EXPECT_EQ(exchange(server->port(), 0, world), "OK");
  for (auto& rank : ranks) EXPECT_EQ(rank->result(Deadline::after(5s)), "OK");
}

TEST(Store, ARankThatNeverJoinsIsNamedWithinTheTimeout) {
  ForkedRank one([](std::uint16_t port) {
    auto store = Store::connect(client_options(port, 1, 3), Deadline::after(5s));
    if (!store) return describe(store.error());
    auto result = check(store->barrier("start", Deadline::after(1500ms)));
    store->close();
    return result;
  });
  auto server = start_server(3);
  one.give_port(server->port());
  auto store = Store::connect(client_options(server->port(), 0, 3), Deadline::after(5s));
  ASSERT_TRUE(store.ok()) << describe(store.error());
  auto start = Clock::now();
  auto barrier = store->barrier("start", Deadline::after(1500ms));
  // The deadline plus a second: CI runs this beside other suites and a fuzzer.
  EXPECT_LT(seconds_since(start), 2.5);
  ASSERT_FALSE(barrier.ok());
  EXPECT_EQ(barrier.error().code, ErrorCode::timeout);
  EXPECT_NE(barrier.error().message.find("rank 2 (never connected)"), std::string::npos)
      << barrier.error().message;
  EXPECT_EQ(barrier.error().message.find("host1:1"), std::string::npos) << barrier.error().message;
  EXPECT_NE(one.result(Deadline::after(3s)).find("rank 2 (never connected)"), std::string::npos);

  // A value nobody sets: the timeout names who is not connected.
  auto value = store->get("unique-id", Deadline::after(300ms));
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.error().code, ErrorCode::timeout);
  EXPECT_NE(value.error().message.find("'unique-id'"), std::string::npos);
  EXPECT_NE(value.error().message.find("rank 2 (never connected)"), std::string::npos)
      << value.error().message;
}

TEST(Store, ARankKilledMidRunMakesTheOthersFailNamingIt) {
  auto waiter = [](std::uint16_t port) {
    auto store = Store::connect(client_options(port, 1, 3), Deadline::after(5s));
    if (!store) return describe(store.error());
    return check(store->barrier("work-done", Deadline::after(20s)));
  };
  ForkedRank one(waiter);
  ForkedRank victim([](std::uint16_t port) {
    auto store = Store::connect(client_options(port, 2, 3), Deadline::after(5s));
    if (!store) return describe(store.error());
    (void)store->set("ready/2", "1", Deadline::after(5s));
    ::pause();  // killed here
    return std::string("not killed");
  });
  auto server = start_server(3);
  one.give_port(server->port());
  victim.give_port(server->port());
  auto store = Store::connect(client_options(server->port(), 0, 3), Deadline::after(5s));
  ASSERT_TRUE(store.ok()) << describe(store.error());
  ASSERT_TRUE(store->get("ready/2", Deadline::after(5s)).ok());

  std::thread killer([&] {
    std::this_thread::sleep_for(200ms);
    victim.kill_now();
  });
  auto start = Clock::now();
  auto barrier = store->barrier("work-done", Deadline::after(20s));
  killer.join();
  EXPECT_LT(seconds_since(start), 3.0);
  ASSERT_FALSE(barrier.ok());
  EXPECT_EQ(barrier.error().code, ErrorCode::unavailable);
  EXPECT_NE(barrier.error().message.find("host2:2 disconnected"), std::string::npos)
      << barrier.error().message;
  auto other = one.result(Deadline::after(5s));
  EXPECT_NE(other.find("host2:2 disconnected"), std::string::npos) << other;
  // The group is broken: later calls fail at once with the same cause.
  auto later = store->set("x", "y", Deadline::after(1s));
  ASSERT_FALSE(later.ok());
  EXPECT_NE(later.error().message.find("host2:2"), std::string::npos);
}

TEST(Store, LosingRankZeroFailsTheClientsFast) {
  auto port_pipe = make_pipe();
  ASSERT_TRUE(port_pipe.ok());
  Child rank_zero([&] {
    auto server = start_server(2);
    std::uint16_t port = server->port();
    [[maybe_unused]] auto n = ::write(port_pipe->write.get(), &port, sizeof port);
    port_pipe->write.reset();
    auto store = Store::connect(client_options(port, 0, 2), Deadline::after(5s));
    ::pause();
  });
  port_pipe->write.reset();
  auto bytes = read_until_eof(port_pipe->read.get(), Deadline::after(5s));
  ASSERT_EQ(bytes.size(), sizeof(std::uint16_t));
  std::uint16_t port = 0;
  std::memcpy(&port, bytes.data(), sizeof port);
  auto store = Store::connect(client_options(port, 1, 2), Deadline::after(5s));
  ASSERT_TRUE(store.ok()) << describe(store.error());
  std::this_thread::sleep_for(100ms);  // rank 0's own hello
  rank_zero.kill_now();
  auto start = Clock::now();
  auto barrier = store->barrier("never", Deadline::after(20s));
  // Far under the 20 s deadline: the lost connection, not the deadline, ends it.
  EXPECT_LT(seconds_since(start), 5.0);
  ASSERT_FALSE(barrier.ok());
  EXPECT_EQ(barrier.error().code, ErrorCode::unavailable);
  EXPECT_NE(barrier.error().message.find("lost the store"), std::string::npos)
      << barrier.error().message;
}

TEST(Store, ConnectRetriesUntilRankZeroListens) {
  std::uint16_t port = free_port();
  ASSERT_NE(port, 0);
  std::unique_ptr<StoreServer> server;
  std::thread late([&] {
    std::this_thread::sleep_for(300ms);
    ServerOptions options;
    options.bind_addr = "127.0.0.1";
    options.port = port;
    options.world_size = 1;
    options.tag = "nccl 2.21.5";
    auto started = StoreServer::start(options);
    if (started) server = std::move(*started);
  });
  auto store = Store::connect(client_options(port, 0, 1), Deadline::after(5s));
  late.join();
  ASSERT_TRUE(server);
  ASSERT_TRUE(store.ok()) << describe(store.error());
  EXPECT_TRUE(store->barrier("alone", Deadline::after(1s)).ok());
}

TEST(Store, ConnectGivesUpAtTheDeadlineNamingTheAddress) {
  std::uint16_t port = free_port();
  ASSERT_NE(port, 0);
  auto start = Clock::now();
  auto store = Store::connect(client_options(port, 3, 4), Deadline::after(600ms));
  EXPECT_LT(seconds_since(start), 1.6 + 0.5);  // the deadline plus more than a second
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.error().code, ErrorCode::timeout);
  EXPECT_NE(store.error().message.find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << store.error().message;
  EXPECT_NE(store.error().message.find("rank 3"), std::string::npos);

  // A name that does not resolve (yet): retried until the deadline, never
  // longer, whatever the DNS server does.
  auto options = client_options(port, 1, 2);
  options.host = "epkit-no-such-host.invalid";
  start = Clock::now();
  store = Store::connect(options, Deadline::after(500ms));
  EXPECT_LT(seconds_since(start), 2.0);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.error().code, ErrorCode::timeout);
  EXPECT_NE(store.error().message.find("epkit-no-such-host.invalid"), std::string::npos)
      << store.error().message;

  // A peer that accepts but never answers (stuck rank 0) cannot hold the
  // handshake past the deadline either.
  auto mute = listen_tcp("127.0.0.1", 0);
  ASSERT_TRUE(mute.ok());
  start = Clock::now();
  store = Store::connect(client_options(*local_port(mute->get()), 1, 2), Deadline::after(500ms));
  EXPECT_LT(seconds_since(start), 2.0);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.error().code, ErrorCode::timeout);
}

// The joining rank hears only "refused" (with what it must agree on, from
// its own side); rank 0's timeout message names the reason.
TEST(Store, HandshakeRefusesMismatchedVersionsAndDuplicates) {
  auto server = start_server(2);
  auto options = client_options(server->port(), 1, 2);
  options.tag = "nccl 2.19.3";
  auto store = Store::connect(options, Deadline::after(2s));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.error().code, ErrorCode::invalid);
  EXPECT_NE(store.error().message.find("refused rank 1"), std::string::npos)
      << store.error().message;
  EXPECT_EQ(store.error().message.find("2.21.5"), std::string::npos) << store.error().message;

  auto rank0 = Store::connect(client_options(server->port(), 0, 2), Deadline::after(2s));
  ASSERT_TRUE(rank0.ok()) << describe(rank0.error());
  auto missing = rank0->get("never", Deadline::after(300ms));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("'nccl 2.19.3', rank 0 reports 'nccl 2.21.5'"),
            std::string::npos)
      << missing.error().message;

  options = client_options(server->port(), 1, 2);
  options.epkit_version = "0.0.1";
  store = Store::connect(options, Deadline::after(2s));
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.error().message.find("refused"), std::string::npos);
  missing = rank0->get("never", Deadline::after(300ms));
  EXPECT_NE(missing.error().message.find("runs epkit 0.0.1"), std::string::npos)
      << missing.error().message;

  options = client_options(server->port(), 1, 3);
  store = Store::connect(options, Deadline::after(2s));
  ASSERT_FALSE(store.ok());
  missing = rank0->get("never", Deadline::after(300ms));
  EXPECT_NE(missing.error().message.find("3 ranks, rank 0 says 2"), std::string::npos)
      << missing.error().message;

  auto first = Store::connect(client_options(server->port(), 1, 2), Deadline::after(2s));
  ASSERT_TRUE(first.ok()) << describe(first.error());
  ASSERT_TRUE(first->set("k", "v", Deadline::after(1s)).ok());
  auto twice = Store::connect(client_options(server->port(), 1, 2), Deadline::after(2s));
  ASSERT_FALSE(twice.ok());
  missing = rank0->get("never", Deadline::after(300ms));
  EXPECT_NE(missing.error().message.find("rank 1 joined twice"), std::string::npos)
      << missing.error().message;
}

// One frame's payload from fd, or "" when none came.
std::string recv_payload(int fd, Deadline deadline) {
  auto header = recv_exact(fd, 4, deadline);
  if (!header) return "";
  auto len = wire::frame_length(*header);
  if (!len) return "";
  auto payload = recv_exact(fd, *len, deadline);
  return payload ? *payload : "";
}

// A hand-made peer on 127.0.0.1: reads the store's challenge, then sends
// whatever the test says (the hostile peer of docs/runtime.md's threat model).
class RawPeer {
 public:
  explicit RawPeer(std::uint16_t port) {
    auto fd = connect_tcp("127.0.0.1", port, Deadline::after(2s));
    if (!fd) return;
    m_fd = std::move(*fd);
    auto challenge = wire::parse_challenge(recv_payload(m_fd.get(), Deadline::after(3s)));
    if (challenge) m_nonce = challenge->nonce;
  }
  bool ok() const { return m_fd.valid() && m_nonce.size() == k_nonce_bytes; }
  void send(std::string_view bytes) { (void)send_all(m_fd.get(), bytes, Deadline::after(2s)); }
  /// A hello for `rank` proven with `secret` (a stranger's guess, or the real one).
  void hello(int rank, int world, const std::string& secret,
             const std::string& tag = "nccl 2.21.5") {
    wire::Hello h;
    h.rank = static_cast<std::uint32_t>(rank);
    h.world = static_cast<std::uint32_t>(world);
    h.host = "stranger";
    h.epkit = EPKIT_VERSION;
    h.tag = tag;
    h.nonce = std::string(k_nonce_bytes, 'n');
    send(wire::hello_frame(h, secret, m_nonce));
  }
  /// The next reply's body ("" when none), with its status.
  std::pair<int, std::string> reply(Millis wait = 3s) {
    auto reply = wire::parse_reply(recv_payload(m_fd.get(), Deadline::after(wait)));
    if (!reply) return {-1, ""};
    return {reply->status, reply->body};
  }
  /// True when the store closed the connection.
  bool closed(Millis wait = 2s) {
    auto more = recv_exact(m_fd.get(), 1, Deadline::after(wait));
    return !more && more.error().code == ErrorCode::unavailable;
  }
  void close() { m_fd.reset(); }

 private:
  Fd m_fd;
  std::string m_nonce;
};

// Sends raw bytes after the challenge and returns the store's reply message
// ("" when it only closed).
std::string raw_exchange(std::uint16_t port, std::string_view bytes) {
  RawPeer peer(port);
  if (!peer.ok()) return "no challenge";
  peer.send(bytes);
  auto [status, body] = peer.reply();
  if (status < 0) return "";
  // After an error the store closes the connection.
  if (!peer.closed()) return "still open: " + body;
  return body;
}

TEST(Store, GarbageGetsAClearErrorAndTheStoreKeepsServing) {
  auto server = start_server(2);
  std::uint16_t port = server->port();
  EXPECT_NE(raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").find("frame length"),
            std::string::npos);
  EXPECT_NE(raw_exchange(port, std::string("\xff\xff\xff\xff", 4)).find("4294967295"),
            std::string::npos);
  EXPECT_NE(raw_exchange(port, std::string("\0\0\0\0", 4)).find("frame length 0"),
            std::string::npos);
  // Before a hello, any request is refused, with nothing about the job.
  EXPECT_EQ(raw_exchange(port, wire::Writer(wire::Op::set).str("k").str("v").frame()), "refused");
  // A hello whose string length runs past the frame.
  EXPECT_EQ(
      raw_exchange(
          port,
          wire::Writer(wire::Op::hello).u32(wire::k_magic).u32(1).u32(0).u32(2).u32(1000).frame()),
      "refused");
  // A frame announced but never completed: the handshake timeout drops it.
  EXPECT_EQ(raw_exchange(port, std::string("\0\0\x10\0abc", 7)),
            "no hello within the handshake timeout");
  // Half a header, then close: nothing to answer, nothing breaks.
  {
    auto fd = connect_tcp("127.0.0.1", port, Deadline::after(2s));
    ASSERT_TRUE(fd.ok());
    (void)send_all(fd->get(), "\0\0", Deadline::after(1s));
  }
  // Random bytes from many connections that then hang up.
  std::mt19937 random(42);
  for (int i = 0; i < 50; ++i) {
    auto fd = connect_tcp("127.0.0.1", port, Deadline::after(2s));
    ASSERT_TRUE(fd.ok());
    std::string noise(random() % 64, '\0');
    for (auto& c : noise) c = static_cast<char>(random());
    if (i % 2 == 0) noise = wire::Writer().u8(static_cast<std::uint8_t>(random())).frame() + noise;
    (void)send_all(fd->get(), noise, Deadline::after(1s));
  }
  // Real ranks still meet.
  std::thread other([&] {
    auto store = Store::connect(client_options(port, 1, 2), Deadline::after(5s));
    if (store) (void)store->barrier("b", Deadline::after(5s));
  });
  auto store = Store::connect(client_options(port, 0, 2), Deadline::after(5s));
  ASSERT_TRUE(store.ok()) << describe(store.error());
  EXPECT_TRUE(store->barrier("b", Deadline::after(5s)).ok());
  other.join();
}

TEST(Store, ARankSendingGarbageAfterItsHelloIsNamed) {
  auto server = start_server(2);
  std::uint16_t port = server->port();
  auto store = Store::connect(client_options(port, 0, 2), Deadline::after(5s));
  ASSERT_TRUE(store.ok());
  auto garbage = wire::Writer().u8(99).frame();
  std::thread rogue([&] {
    std::this_thread::sleep_for(100ms);
    // A member (this store has no secret) that joins, works, then breaks.
    RawPeer peer(port);
    peer.hello(1, 2, "");
    (void)peer.reply();
    peer.send(wire::Writer(wire::Op::set).str("k").str("v").frame());
    (void)peer.reply();
    peer.send(garbage);
    (void)peer.reply();
  });
  auto barrier = store->barrier("b", Deadline::after(5s));
  rogue.join();
  ASSERT_FALSE(barrier.ok());
  EXPECT_NE(barrier.error().message.find("stranger:1 sent a malformed request"), std::string::npos)
      << barrier.error().message;
}

TEST(Store, ATimeoutInALargeWorldNamesAFewRanks) {
  auto server = start_server(5000);
  auto store = Store::connect(client_options(server->port(), 7, 5000), Deadline::after(2s));
  ASSERT_TRUE(store.ok()) << describe(store.error());
  auto barrier = store->barrier("all", Deadline::after(200ms));
  ASSERT_FALSE(barrier.ok());
  EXPECT_EQ(barrier.error().code, ErrorCode::timeout);
  EXPECT_NE(barrier.error().message.find("rank 0 (never connected)"), std::string::npos);
  EXPECT_EQ(barrier.error().message.find("host7:7"), std::string::npos);
  EXPECT_NE(barrier.error().message.find("and 4983 more"), std::string::npos)
      << barrier.error().message;
}

TEST(Store, ShortAndPassedDeadlinesLeaveTheConnectionUsable) {
  auto server = start_server(1);
  auto store = Store::connect(client_options(server->port(), 0, 1), Deadline::after(2s));
  ASSERT_TRUE(store.ok()) << describe(store.error());
  auto passed = store->get("k", Deadline::after(0ms));
  ASSERT_FALSE(passed.ok());
  EXPECT_EQ(passed.error().code, ErrorCode::timeout);
  for (auto budget : {100ms, 300ms}) {
    auto start = Clock::now();
    auto missing = store->get("k", Deadline::after(budget));
    EXPECT_LE(seconds_since(start), budget.count() / 1000.0 + 1.0);
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.error().code, ErrorCode::timeout) << missing.error().message;
  }
  EXPECT_TRUE(store->set("k", "v", Deadline::after(1s)).ok());
  EXPECT_EQ(store->get("k", Deadline::after(1s)).value_or(std::string()), "v");
}

TEST(Store, BoundsKeysAndValues) {
  ServerOptions options;
  options.bind_addr = "127.0.0.1";
  options.world_size = 1;
  options.max_bytes = 1000;
  auto server = StoreServer::start(options);
  ASSERT_TRUE(server.ok());
  auto client = client_options((*server)->port(), 0, 1);
  client.tag = "";
  auto store = Store::connect(client, Deadline::after(2s));
  ASSERT_TRUE(store.ok()) << describe(store.error());
  EXPECT_TRUE(store->set("a", std::string(900, 'x'), Deadline::after(1s)).ok());
  auto full = store->set("b", std::string(200, 'x'), Deadline::after(1s));
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.error().message.find("store full"), std::string::npos);
  EXPECT_TRUE(store->set("a", std::string(10, 'y'), Deadline::after(1s)).ok());  // replaced
  EXPECT_TRUE(store->set("b", std::string(200, 'x'), Deadline::after(1s)).ok());
  auto not_counter = store->add("a", 1, Deadline::after(1s));
  ASSERT_FALSE(not_counter.ok());
  EXPECT_NE(not_counter.error().message.find("not a counter"), std::string::npos);
  // Too large for one frame or key: refused before sending, and the
  // connection stays usable.
  auto huge = store->set("h", std::string(wire::k_max_frame, 'x'), Deadline::after(2s));
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.error().message.find("exceeds"), std::string::npos);
  EXPECT_FALSE(store->get(std::string(2000, 'k'), Deadline::after(1s)).ok());
  EXPECT_TRUE(store->set("c", "1", Deadline::after(1s)).ok());
}

// docs/runtime.md: two nodes faked on one host with --nnodes/--node-rank and a
// different NCCL_HOSTID per node; each finds its rank, meets through rank 0's
// store and sees two nodes in the facts.
std::string fake_node(std::uint16_t port, int node) {
  host::Env env(std::map<std::string, std::string>{{"NCCL_HOSTID", node == 0 ? "fake-a" : "fake-b"},
                                                   {"NCCL_IB_HCA", "mlx5_0"}});
  LaunchOptions options;
  options.nnodes = 2;
  options.node_rank = node;
  options.master = "127.0.0.1:" + std::to_string(port);
  options.nproc_per_node = 1;
  auto info = discover(env, options);
  if (!info) return describe(info.error());
  if (info->rank != node || info->world_size != 2) return "wrong rank: " + info->describe();
  auto deadline = Deadline::after(5s);
  auto session = open_store(*info, "box", "nccl 2.21.5", "a-secret-of-the-faked-job",
                            info->master_addr, deadline);
  if (!session) return describe(session.error());
  auto mine = collect_host_facts(host::Host(host::Sysroot("/"), env, host::Libraries::none("test")),
                                 info->rank, 0);
  mine.host = "box";
  auto all = exchange_facts(session->store, mine, info->world_size, deadline);
  if (!all) return describe(all.error());
  if ((*all)[0].host_id != "fake-a" || (*all)[1].host_id != "fake-b") return "host ids";
  auto mismatches = compare_facts(*all);
  if (!mismatches.empty()) return "mismatch: " + mismatches.front().summary;
  // Rank 0 serves the store: everyone meets before anyone leaves.
  if (auto e = check(session->store.barrier("done", deadline)); !e.empty()) return e;
  session->store.close();
  return "OK";
}

TEST(Store, TwoNodesFakedOnOneHost) {
  std::uint16_t port = free_port();
  ASSERT_NE(port, 0);
  ForkedRank node0([](std::uint16_t p) { return fake_node(p, 0); });
  ForkedRank node1([](std::uint16_t p) { return fake_node(p, 1); });
  node1.give_port(port);  // node 1 first: it retries until rank 0 serves
  std::this_thread::sleep_for(100ms);
  node0.give_port(port);
  EXPECT_EQ(node0.result(Deadline::after(8s)), "OK");
  EXPECT_EQ(node1.result(Deadline::after(8s)), "OK");
}

// ---- a hostile peer on 127.0.0.1 (docs/runtime.md, "Threat model")

constexpr const char* k_secret = "0123456789abcdef-the-job-secret";

std::unique_ptr<StoreServer> start_secret_server(int world, std::size_t max_bytes = 64u << 20) {
  ServerOptions options;
  options.bind_addr = "127.0.0.1";
  options.world_size = world;
  options.tag = "nccl 2.21.5";
  // Long enough that a lock-out could not end by strangers timing out.
  options.handshake_timeout = 5000ms;
  options.secret = k_secret;
  options.max_bytes = max_bytes;
  auto server = StoreServer::start(options);
  if (!server) throw std::runtime_error(server.error().message);
  return std::move(*server);
}

ClientOptions member(std::uint16_t port, int rank, int world) {
  auto options = client_options(port, rank, world);
  options.secret = k_secret;
  return options;
}

// Two members meet: the store still serves the job.
void expect_members_meet(std::uint16_t port) {
  std::thread other([&] {
    auto store = Store::connect(member(port, 1, 2), Deadline::after(5s));
    if (store) (void)store->barrier("b", Deadline::after(5s));
    if (store) store->close();
  });
  auto start = Clock::now();
  auto store = Store::connect(member(port, 0, 2), Deadline::after(5s));
  ASSERT_TRUE(store.ok()) << describe(store.error());
  EXPECT_TRUE(store->barrier("b", Deadline::after(5s)).ok());
  EXPECT_LT(seconds_since(start), 3.0);
  other.join();
  store->close();
}

TEST(StoreThreats, AStrangerWithoutTheSecretHearsOnlyRefused) {
  auto server = start_secret_server(2);
  std::uint16_t port = server->port();
  for (std::string guess : {"", "wrong-secret-of-16-bytes"}) {
    RawPeer stranger(port);
    ASSERT_TRUE(stranger.ok());
    stranger.hello(1, 2, guess);
    auto [status, body] = stranger.reply();
    EXPECT_NE(status, 0);
    // Not the world size, the version or the tag: one word.
    EXPECT_EQ(body, "refused");
    EXPECT_TRUE(stranger.closed());
  }
  // A wrong world size with the right secret is refused the same way.
  RawPeer wrong_world(port);
  wrong_world.hello(1, 3, k_secret);
  EXPECT_EQ(wrong_world.reply().second, "refused");
  // The real client without the secret: refused, not retried, and the
  // message names what must agree from its own side only.
  auto start = Clock::now();
  auto store = Store::connect(client_options(port, 1, 2), Deadline::after(5s));
  ASSERT_FALSE(store.ok());
  EXPECT_LT(seconds_since(start), 2.0);
  EXPECT_NE(store.error().message.find("refused"), std::string::npos);
  EXPECT_EQ(store.error().message.find("world size 2"), std::string::npos);
  expect_members_meet(port);
}

TEST(StoreThreats, AServerThatCannotProveTheSecretIsNotBelieved) {
  // A fake rendezvous on 127.0.0.1: challenges, then welcomes anyone.
  auto listener = listen_tcp("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  std::uint16_t port = *local_port(listener->get());
  std::thread fake([&] {
    int fd = ::accept(listener->get(), nullptr, nullptr);
    if (fd < 0) return;
    Fd conn(fd);
    (void)send_all(fd, wire::challenge_frame(std::string(k_nonce_bytes, 'c')), Deadline::after(2s));
    (void)recv_payload(fd, Deadline::after(2s));
    (void)send_all(fd, wire::Writer().u8(0).str(std::string(k_mac_bytes, 'x')).frame(),
                   Deadline::after(2s));
    std::this_thread::sleep_for(300ms);
  });
  auto store = Store::connect(member(port, 1, 2), Deadline::after(3s));
  fake.join();
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.error().code, ErrorCode::invalid);
  EXPECT_NE(store.error().message.find("did not prove the job's secret"), std::string::npos)
      << store.error().message;
}

TEST(StoreThreats, IdleStrangersCannotLockOutARealNode) {
  auto server = start_secret_server(2);
  std::vector<Fd> idle;
  for (int i = 0; i < 80; ++i) {
    auto fd = connect_tcp("127.0.0.1", server->port(), Deadline::after(2s));
    ASSERT_TRUE(fd.ok());
    idle.push_back(std::move(*fd));
  }
  std::this_thread::sleep_for(100ms);
  expect_members_meet(server->port());
}

TEST(StoreThreats, AStrangerWhoClaimsAFreeRankAndLeavesFailsNoOne) {
  // No secret: anyone may say hello. Claiming rank 1 and leaving (closing,
  // saying goodbye, or sending garbage) before any request gives the rank
  // back.
  auto server = start_server(2);
  std::uint16_t port = server->port();
  {
    RawPeer drop(port);
    drop.hello(1, 2, "");
    ASSERT_EQ(drop.reply().first, 0);
  }
  {
    RawPeer bye(port);
    bye.hello(1, 2, "");
    ASSERT_EQ(bye.reply().first, 0);
    bye.send(wire::Writer(wire::Op::bye).frame());
    (void)bye.reply();
  }
  {
    RawPeer garbage(port);
    garbage.hello(1, 2, "");
    ASSERT_EQ(garbage.reply().first, 0);
    garbage.send(wire::Writer().u8(99).frame());
    EXPECT_NE(garbage.reply().first, 0);
  }
  std::this_thread::sleep_for(100ms);
  std::thread other([&] {
    auto store = Store::connect(client_options(port, 1, 2), Deadline::after(5s));
    if (store) (void)store->barrier("b", Deadline::after(5s));
    if (store) store->close();
  });
  auto store = Store::connect(client_options(port, 0, 2), Deadline::after(5s));
  ASSERT_TRUE(store.ok()) << describe(store.error());
  auto met = store->barrier("b", Deadline::after(5s));
  EXPECT_TRUE(met.ok()) << describe(met.error());
  other.join();
}

TEST(StoreThreats, AddCountsAgainstTheSizeCapAndNeverOverflows) {
  auto server = start_secret_server(1, 64 * 1024);
  auto store = Store::connect(member(server->port(), 0, 1), Deadline::after(2s));
  ASSERT_TRUE(store.ok()) << describe(store.error());
  int added = 0;
  Result<std::int64_t> last = std::int64_t{0};
  for (; added < 5000; ++added) {
    last = store->add("counter/" + std::to_string(added), 1, Deadline::after(1s));
    if (!last) break;
  }
  ASSERT_FALSE(last.ok()) << "100k-byte cap never reached by " << added << " counters";
  EXPECT_NE(last.error().message.find("store full"), std::string::npos) << last.error().message;
  EXPECT_LT(added, 1000);

  auto small = start_secret_server(1);
  auto counter = Store::connect(member(small->port(), 0, 1), Deadline::after(2s));
  ASSERT_TRUE(counter.ok());
  auto max = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(counter->add("c", max, Deadline::after(1s)).value_or(0), max);
  auto over = counter->add("c", 1, Deadline::after(1s));
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.error().message.find("overflow"), std::string::npos);
  EXPECT_EQ(counter->add("c", 0, Deadline::after(1s)).value_or(0), max);
  EXPECT_EQ(
      counter->add("d", std::numeric_limits<std::int64_t>::min(), Deadline::after(1s)).value_or(0),
      std::numeric_limits<std::int64_t>::min());
  EXPECT_FALSE(counter->add("d", -1, Deadline::after(1s)).ok());
}

TEST(StoreThreats, WaitingRequestsPerRankAreBounded) {
  auto server = start_secret_server(2);
  RawPeer peer(server->port());
  peer.hello(1, 2, k_secret);
  ASSERT_EQ(peer.reply().first, 0);
  std::string many;
  for (int i = 0; i < 20; ++i) {
    many += wire::Writer(wire::Op::get).str("missing").u32(2000).frame();
  }
  peer.send(many);
  int refused = 0;
  for (int i = 0; i < 16; ++i) {
    auto [status, body] = peer.reply(1s);
    if (status > 0 && body.find("requests waiting") != std::string::npos) ++refused;
  }
  EXPECT_EQ(refused, 16);
}

TEST(StoreThreats, OversizedStrangerFramesAreRefusedAtTheHeader) {
  auto server = start_secret_server(2);
  // 1 MiB is a member's limit; before the hello 8 KiB is.
  auto reply = raw_exchange(server->port(), wire::Writer().u32(100000).frame().substr(4));
  EXPECT_NE(reply.find("frame length 100000"), std::string::npos) << reply;
  expect_members_meet(server->port());
}

TEST(Deadline, SaturatesInsteadOfOverflowing) {
  for (double huge : {1e10, 1e300, std::numeric_limits<double>::infinity()}) {
    auto d = Deadline::after_seconds(huge);
    EXPECT_FALSE(d.expired()) << huge;
    EXPECT_GT(d.remaining(), Millis(1000LL * 3600 * 24 * 365)) << huge;
    EXPECT_GT(d.poll_ms(), 0);
  }
  EXPECT_TRUE(Deadline::after_seconds(std::nan("")).expired());
  EXPECT_TRUE(Deadline::after_seconds(-5).expired());
  EXPECT_FALSE(Deadline::after(Millis::max()).expired());
}

host::Env env_of(std::map<std::string, std::string> vars) {
  return host::Env(std::move(vars));
}

TEST(StoreAuth, SecretsComeFromAFileOrTheEnvironmentAndBadOnesAreNamed) {
  EXPECT_EQ(load_secret(env_of({})).value_or("x"), "");
  EXPECT_EQ(load_secret(env_of({{"EPKIT_SECRET", "sixteen-bytes-ok\n"}})).value_or(""),
            "sixteen-bytes-ok");
  auto short_one = load_secret(env_of({{"EPKIT_SECRET", "short"}}));
  ASSERT_FALSE(short_one.ok());
  EXPECT_NE(short_one.error().message.find("at least 16"), std::string::npos);
  auto missing = load_secret(env_of({{"EPKIT_SECRET_FILE", "/nonexistent/epkit-secret"}}));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("EPKIT_SECRET_FILE"), std::string::npos);
  auto dir = load_secret(env_of({{"EPKIT_SECRET_FILE", "/"}}));
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.error().message.find("not a regular file"), std::string::npos);
  // The MAC depends on the key, the label and the data.
  EXPECT_EQ(hmac_sha256("k", "l", "d").size(), k_mac_bytes);
  EXPECT_NE(hmac_sha256("k", "l", "d"), hmac_sha256("k2", "l", "d"));
  EXPECT_NE(hmac_sha256("k", "l", "d"), hmac_sha256("k", "l2", "d"));
  EXPECT_TRUE(same_mac(hmac_sha256("k", "l", "d"), hmac_sha256("k", "l", "d")));
  EXPECT_FALSE(same_mac("", ""));
}

}  // namespace
}  // namespace epkit::runtime
