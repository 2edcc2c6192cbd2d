#include "ep_harness/node_nics.h"

#ifdef EPKIT_WITH_CUDA
#include <string>
#include <vector>

#include "topo/probe.h"

namespace epkit::harness {

std::optional<checks::NicWatch> start_node_nic_watch(const host::Host& host,
                                                     const runtime::LaunchInfo& launch,
                                                     const runtime::GpuRank& rank,
                                                     runtime::RankIo& io) {
  if (launch.local_rank != 0 || launch.nnodes <= 1) return std::nullopt;
  auto snap = topo::probe(host);
  std::vector<std::string> ids;
  const auto& mine = rank.facts[static_cast<std::size_t>(launch.rank)];
  for (const auto& f : rank.facts)
    if (f.host_id == mine.host_id) ids.push_back(f.pci_bus_id);
  auto gpus = checks::gpu_indices_of_bus_ids(snap, ids);
  if (!gpus) {
    io.line("NIC map: not checked: " + gpus.error().message);
    return std::nullopt;
  }
  std::optional<checks::NicWatch> watch;
  watch.emplace(host.fs(), snap, *gpus);
  for (const auto& l : watch->start()) io.line(l);
  return watch;
}

}  // namespace epkit::harness
#endif
