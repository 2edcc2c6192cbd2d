#include "runtime/store.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>

#include "runtime/auth.h"

namespace epkit::runtime {

namespace {

// "127.0.0.1", "::1", "localhost": the caller asked for loopback itself.
bool names_loopback(const std::string& addr) {
  if (addr == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, addr.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return ::inet_pton(AF_INET6, addr.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

}  // namespace

Result<StoreSession> open_store(const LaunchInfo& info, const std::string& my_host,
                                const std::string& tag, const std::string& secret,
                                const std::string& bind_addr, Deadline deadline) {
  StoreSession session{nullptr, Store(Fd(), info.rank, "")};
  ClientOptions client;
  client.host = info.master_addr;
  client.port = info.master_port;
  client.rank = info.rank;
  client.world_size = info.world_size;
  client.my_host = my_host;
  client.tag = tag;
  client.secret = secret;
  if (info.rank == 0) {
    ServerOptions server;
    server.bind_addr = bind_addr;
    server.secret = secret;
    server.port = info.master_port;
    server.world_size = info.world_size;
    server.tag = tag;
    auto started = StoreServer::start(server);
    if (!started) {
      return make_error(started.error().code,
                        fmt::format("rank 0 cannot serve the store: {}", started.error().message));
    }
    session.server = std::move(*started);
    if (info.nnodes > 1 && session.server->loopback_only() && !names_loopback(bind_addr)) {
      // A hosts file mapping this host's name to 127.0.1.1 (Debian's
      // default) would otherwise leave every other node timing out. A
      // loopback address given as such is nodes faked on one host.
      return make_error(ErrorCode::invalid,
                        fmt::format("rank 0 would serve the store on a loopback address ({} "
                                    "resolves to one here), which the other {} nodes cannot "
                                    "reach; set EPKIT_BIND_ADDR to this node's address",
                                    bind_addr, info.nnodes - 1));
    }
    client.port = session.server->port();
  }
  auto store = Store::connect(client, deadline);
  if (!store) return store.error();
  session.store = std::move(*store);
  return session;
}

}  // namespace epkit::runtime
