// The rendezvous store's server (runtime/store.h): rank 0 serves it on a
// background thread, one poll loop over every connection.
#pragma once

#include <epkit/result.h>

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/deadline.h"

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

}  // namespace epkit::runtime
