// Doctor checks that see on a live node what a family of `epkit logs` sees in
// a log (src/logs/catalogue_families.cc names them as its doctor check):
// port error counters behind IB async events and the Fabric Manager behind
// NVLS multicast failures (P2P failures have gpu.p2p, in gpu.cc).
#pragma once

#include <span>

#include "checks/check.h"

namespace epkit::checks {

std::span<const Check> log_counterpart_checks();

}  // namespace epkit::checks
