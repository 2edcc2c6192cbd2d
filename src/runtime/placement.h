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
/// EPKIT_TOPOLOGY_HOST and EPKIT_NODE_NAME. A value with whitespace or control
/// characters is an invalid error naming the variable.
Result<Placement> placement_from_env(const host::Env& env, int index, std::string addr);

/// One line of JSON, and back; decode names what is wrong.
std::string encode(const Placement& placement);
Result<Placement> decode_placement(std::string_view text);

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

struct ExchangeOptions {
  int nnodes = 1;
  std::string master_addr = "127.0.0.1";  // index 0's address
  std::uint16_t port = 0;
  /// Index 0 binds here ("" = every interface).
  std::string bind_addr;
  std::string tag = "placement";
};

/// Publishes `self` and returns the order. Index 0 serves the store, waits
/// for every placement, orders them and publishes the outcome (the order, or
/// the error naming the nodes that never reported) for the others to take.
/// On timeout the error names the nodes that never connected or reported
/// (index 0's message, or the others' own when their deadline comes first).
Result<NodeOrder> exchange_placements(const Placement& self, const ExchangeOptions& options,
                                      Deadline deadline);

}  // namespace epkit::runtime
