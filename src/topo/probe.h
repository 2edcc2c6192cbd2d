// probe(Host) -> Snapshot: read the node's GPUs, NVSwitches, RDMA NICs,
// netdevs and PCIe switches through the sysroot (and NVML when the host's
// loader gives it: the live node, or a test's fake).
// A missing or unreadable file becomes a note, never an error.
#pragma once

#include "host/host.h"
#include "topo/snapshot.h"

namespace epkit::topo {

Snapshot probe(const host::Host& host);

/// Fills snap.switches from the GPUs' and NICs' bridge chains: each endpoint
/// joins the switch whose upstream port is the bridge right below its root
/// port. probe() calls it; exposed for snapshots edited by hand.
void group_switches(Snapshot& snap);

}  // namespace epkit::topo
