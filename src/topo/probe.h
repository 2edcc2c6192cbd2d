// probe(Host) -> Snapshot: read the node's GPUs, NVSwitches, RDMA NICs,
// netdevs and PCIe switches through the sysroot (and NVML on the live node).
// A missing or unreadable file becomes a note, never an error.
#pragma once

#include "host/host.h"
#include "topo/snapshot.h"

namespace epkit::topo {

Snapshot probe(const host::Host& host);

}  // namespace epkit::topo
