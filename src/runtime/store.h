// The rendezvous store: rank 0 serves a small TCP key-value store; every rank
// (rank 0 included) talks to it through a Store client.
//
// It carries what ranks must agree on before NCCL starts (the ncclUniqueId,
// each rank's facts) and fails fast instead of hanging: every call takes a
// deadline; a rank whose connection drops without saying goodbye (it crashed
// or was killed) makes every pending and later blocking call fail with an
// error naming host:rank; a timeout names the ranks that never arrived.
//
// Exposed to the network, it trusts no peer until its hello proves the job's
// secret (runtime/auth.h; docs/runtime.md, "Threat model"): every refusal
// says only "refused", strangers' connections are capped per address, and
// what any peer sends is parsed and bounded before use.
#pragma once

#include <epkit/result.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/deadline.h"
#include "runtime/launch.h"
#include "runtime/socket.h"

namespace epkit::runtime {

struct ServerOptions {
  /// The address the job names for rank 0 (its pod IP, the --master host).
  /// "" = every interface: tests and callers that chose it knowingly.
  std::string bind_addr;
  std::uint16_t port = 0;  // 0 = ephemeral (tests)
  int world_size = 1;
  /// The handshake must match these exactly (see ClientOptions).
  std::string epkit_version = EPKIT_VERSION;
  std::string tag;
  /// A connection that has not sent its hello by then is dropped.
  Millis handshake_timeout{5000};
  /// TCP keepalive idle time: a vanished host is noticed after about this
  /// plus three probes at half of it.
  int keepalive_idle_s = 10;
  /// Bound on keys plus values held (`add`'s counters included).
  std::size_t max_bytes = 64u << 20;
  /// The job's secret (load_secret); "" = none: any peer that reaches the
  /// port may join.
  std::string secret;
};

/// The largest world the store serves (its rank table is allocated up front).
inline constexpr int k_max_world_size = 1 << 20;

/// Serves the store on a background thread until destroyed.
class StoreServer {
 public:
  static Result<std::unique_ptr<StoreServer>> start(const ServerOptions& options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  std::uint16_t port() const;
  /// True when the listener is bound to a loopback address (127.0.0.0/8,
  /// ::1): only this host can reach it.
  bool loopback_only() const;

  class Impl;

 private:
  explicit StoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

struct ClientOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = k_default_master_port;
  int rank = 0;
  int world_size = 1;
  /// This rank's host name, used in every message that names it.
  std::string my_host;
  std::string epkit_version = EPKIT_VERSION;
  /// Caller-provided string that all ranks must share, e.g. the NCCL version.
  std::string tag;
  /// The job's secret; the server must prove it back, too.
  std::string secret;
  Millis first_backoff{50};
  Millis max_backoff{1000};
  int keepalive_idle_s = 10;
};

/// A client of the store. Calls are serialised (thread-safe) and each is
/// bounded by its deadline. After a timeout or a lost connection the client
/// is broken: later calls fail at once with the first cause.
class Store {
 public:
  /// Connects, retrying with exponential backoff until the deadline (rank 0
  /// may start later than the others), then shakes hands. A refused
  /// handshake (another secret, version, tag or world size, or a rank taken)
  /// is not retried, nor is a server that cannot prove the secret.
  static Result<Store> connect(const ClientOptions& options, Deadline deadline);

  Store(Store&&) noexcept = default;
  Store& operator=(Store&&) noexcept = default;
  ~Store();

  Result<void> set(const std::string& key, std::string_view value, Deadline deadline);
  /// Waits until the key exists, then returns its value.
  Result<std::string> get(const std::string& key, Deadline deadline);
  /// Waits until every key exists.
  Result<void> wait(const std::vector<std::string>& keys, Deadline deadline);
  /// Adds delta to a counter (missing = 0) and returns the new value.
  Result<std::int64_t> add(const std::string& key, std::int64_t delta, Deadline deadline);
  /// Returns when every rank has entered the barrier of this name. On timeout
  /// the error lists the ranks that did not arrive.
  Result<void> barrier(const std::string& name, Deadline deadline);
  /// Says goodbye so the server does not take the close for a crash.
  void close();

  int rank() const { return m_rank; }
  const std::string& endpoint() const { return m_endpoint; }

 private:
  friend Result<struct StoreSession> open_store(const LaunchInfo&, const std::string&,
                                                const std::string&, const std::string&,
                                                const std::string&, Deadline);
  Store(Fd fd, int rank, std::string endpoint)
      : m_fd(std::move(fd)),
        m_rank(rank),
        m_endpoint(std::move(endpoint)),
        m_mutex(std::make_unique<std::mutex>()) {}
  Result<std::string> request(const std::string& frame, Deadline deadline, bool waits);
  /// Reads the server's challenge and answers with the hello.
  Result<void> handshake(const ClientOptions& options, Deadline deadline);

  Fd m_fd;
  int m_rank = 0;
  std::string m_endpoint;
  std::unique_ptr<std::mutex> m_mutex;
  std::optional<Error> m_broken;
};

/// Rank 0's server (when this rank serves) and this rank's client.
struct StoreSession {
  std::unique_ptr<StoreServer> server;
  Store store;
};

/// Starts the server on rank 0 (at info.master_port, bound to `bind_addr`:
/// the master address unless the caller knows better) and connects this rank
/// to info.master_addr, both with `secret`.
Result<StoreSession> open_store(const LaunchInfo& info, const std::string& my_host,
                                const std::string& tag, const std::string& secret,
                                const std::string& bind_addr, Deadline deadline);

}  // namespace epkit::runtime
