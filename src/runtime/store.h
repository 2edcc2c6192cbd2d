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

#include <memory>
#include <string>

#include "runtime/deadline.h"
#include "runtime/launch.h"
#include "runtime/store_client.h"
#include "runtime/store_server.h"

namespace epkit::runtime {

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
