// The NIC part of an EP run across nodes (`test ep`, `bench ep`): the
// GPU-to-NIC map printed before the traffic and the NIC counters judged
// after it, once per node (checks/nic_watch.h). Here, not in checks/ or
// runtime/: it needs both a rank's facts (runtime) and the NIC watch
// (checks), and neither of those layers sees the other.
#pragma once

#ifdef EPKIT_WITH_CUDA
#include <optional>

#include "checks/nic_watch.h"
#include "host/host.h"
#include "runtime/gpu_rank.h"
#include "runtime/rank_session.h"

namespace epkit::harness {

/// On local rank 0 of a run of several nodes: prints the NIC map of this
/// node's GPUs and returns the watcher whose finish() gives the post-run
/// lines. Elsewhere, or when the map cannot be made (a line says why):
/// nullopt. Call after runtime::open_gpu_rank (the facts name each rank's GPU) and
/// before the run's traffic.
std::optional<checks::NicWatch> start_node_nic_watch(const host::Host& host,
                                                     const runtime::LaunchInfo& launch,
                                                     const runtime::GpuRank& rank,
                                                     runtime::RankIo& io);

}  // namespace epkit::harness
#endif
