// The NIC part of a GPU command run across nodes (`test ep`, `bench ep`):
// the GPU-to-NIC map printed before the traffic and the NIC counters judged
// after it, once per node (checks/nic_watch.h).
#pragma once

#ifdef EPKIT_WITH_CUDA
#include <optional>

#include "checks/nic_watch.h"
#include "cli/gpu_launch.h"
#include "host/host.h"
#include "runtime/gpu_rank.h"

namespace epkit::cli {

/// On local rank 0 of a run of several nodes: prints the NIC map of this
/// node's GPUs and returns the watcher whose finish() gives the post-run
/// lines. Elsewhere, or when the map cannot be made (a line says why):
/// nullopt. Call after runtime::open_gpu_rank (the facts name each rank's GPU) and
/// before the run's traffic.
std::optional<checks::NicWatch> start_node_nic_watch(const host::Host& host,
                                                     const runtime::LaunchInfo& launch,
                                                     const runtime::GpuRank& rank,
                                                     runtime::RankIo& io);

}  // namespace epkit::cli
#endif
