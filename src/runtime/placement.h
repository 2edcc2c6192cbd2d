// Topology-ordered node ranks without ssh.
//
// Under a Kubernetes Indexed Job/JobSet a pod's index says nothing about where
// it landed, so node rank 1 may sit in another block than node rank 0. Before
// the job proper, every node (one process per pod) publishes its placement --
// GKE's cloud.google.com/gce-topology-{block,subblock,host} node labels, or
// only its node name elsewhere -- to a store served by index 0 (the
// rendezvous host every pod already knows). Every node then reads all of
// them and computes the same order: by block, subblock, physical host, node
// name, index. Its position in that order is its node rank; the node ranked 0
// serves the job's own rendezvous. A node that never reports is named when
// the deadline passes.
#pragma once

#include <epkit/result.h>

#include <cstdint>
#include <string>
#include <vector>

#include "host/env.h"
#include "runtime/deadline.h"

namespace epkit::runtime {

/// The largest job `epkit place` orders, and the longest value it takes.
inline constexpr int k_max_nodes = 65536;
inline constexpr std::size_t k_max_placement_value = 253;

struct Placement {
  int index = 0;      // JOB_COMPLETION_INDEX: the node rank before ordering
  std::string addr;   // where the others reach this node (pod FQDN or IP)
  std::string node;   // the Kubernetes node (or host) name
  std::string block;  // gce-topology-block; "" when the node has no label
  std::string subblock;
  std::string physical_host;  // gce-topology-host
};

/// The environment names a pod sets (the JobSet's placement init container
/// writes them; docs/deploy.md): EPKIT_TOPOLOGY_BLOCK, EPKIT_TOPOLOGY_SUBBLOCK,
/// EPKIT_TOPOLOGY_HOST and EPKIT_NODE_NAME. A value with anything but
/// letters, digits and . _ : - is an invalid error naming the variable.
Result<Placement> placement_from_env(const host::Env& env, int index, std::string addr);

/// Letters, digits and . _ : - only, at most k_max_placement_value bytes:
/// what a host name, an address or a Kubernetes label value may hold, and
/// nothing a shell or a terminal would act on.
Result<void> check_placement_value(std::string_view name, std::string_view value);

/// One line of JSON, and back; decode names what is wrong (placement_json.cc).
/// Every field is checked: an index in 0..max_index, values as above.
std::string encode(const Placement& placement);
Result<Placement> decode_placement(std::string_view text, int max_index = k_max_nodes - 1);

struct NodeOrder {
  /// The nodes in node-rank order.
  std::vector<Placement> nodes;
  /// This index's node rank, or -1 when it is not in the order.
  int node_rank_of(int index) const;
  /// A table: node rank, index, block, subblock, host, node, address.
  std::string describe() const;
};

/// Orders by block, subblock, physical host (unlabelled nodes after labelled
/// ones at each level), then node name, then index. Indexes must be unique.
Result<NodeOrder> order_nodes(std::vector<Placement> placements);

/// What index 0 publishes for the others: {"order":[...]} or
/// {"error":"...","code":N}.
std::string encode_outcome(const Result<NodeOrder>& order);
/// A published outcome, checked strictly: the error's text and code, or an
/// order of exactly `nnodes` placements holding every index 0..nnodes-1
/// once. Anything else (another node may have forged it) is an invalid
/// error, never an order missing this node.
Result<NodeOrder> decode_outcome(std::string_view text, int nnodes);

struct ExchangeOptions {
  int nnodes = 1;
  std::string master_addr = "127.0.0.1";  // index 0's address
  std::uint16_t port = 0;
  /// Index 0 binds here ("" = every interface): `epkit place` passes its
  /// own address (the pod IP).
  std::string bind_addr;
  std::string tag = "placement";
  /// The job's secret (runtime/auth.h); "" = none.
  std::string secret;
};

/// Publishes `self` and returns the order. Index 0 serves the store, waits
/// for every placement, orders them and publishes the outcome (the order, or
/// the error naming the nodes that never reported) for the others to take.
/// On timeout the error names the nodes that never connected or reported
/// (index 0's message, or the others' own when their deadline comes first).
Result<NodeOrder> exchange_placements(const Placement& self, const ExchangeOptions& options,
                                      Deadline deadline);

}  // namespace epkit::runtime
