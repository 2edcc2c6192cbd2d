// The rendezvous store's client (runtime/store.h): what every rank, rank 0
// included, calls.
#pragma once

#include <epkit/result.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/deadline.h"
#include "runtime/launch.h"
#include "runtime/socket.h"

namespace epkit::runtime {

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

}  // namespace epkit::runtime
