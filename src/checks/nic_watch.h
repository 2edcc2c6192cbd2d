// NicWatch: the NIC part of a multi-node EP run, for the command that runs it
// (one instance per node: the node agent or local rank 0). start() before the
// run's traffic: reads the NIC counters and gives the lines that show
// the GPU-to-NIC map and the variables that force it. finish() after the run:
// reads them again and gives the per-NIC bytes and the findings of
// check_nic_traffic. It never prints (the CLI does) and needs no CUDA.
//
// In a rank, once the facts are exchanged (join_gpu_job / open_gpu_rank: every
// rank's host_id and pci_bus_id) and before the run's traffic (NCCL's own
// init moves kilobytes, far under what is judged):
//   if (launch.local_rank == 0 && launch.nnodes > 1) {
//     auto snap = topo::probe(host);
//     std::vector<std::string> ids;  // the bus ids of the ranks with my host_id
//     auto gpus = checks::gpu_indices_of_bus_ids(snap, ids);
//     watch.emplace(host.fs(), snap, *gpus);
//     for (auto& line : watch->start()) io.line(line);
//   }
//   ... the run, then the barrier that ends it (every local rank done) ...
//   if (watch) for (auto& line : watch->finish().lines) io.line(line);
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checks/nic_traffic.h"
#include "host/sysroot.h"
#include "topo/model.h"
#include "topo/nic_counters.h"
#include "topo/snapshot.h"

namespace epkit::checks {

struct NicWatchResult {
  std::vector<std::string> lines;  // to print, one per line, no newline
  NicTrafficReport report;
};

class NicWatch {
 public:
  /// snap: this node's probe (topo::probe). gpus: snapshot indices of the GPUs
  /// the node's ranks use (gpu_index_of_bdf maps a CUDA device's bus id).
  NicWatch(host::Sysroot fs, const topo::Snapshot& snap, const std::vector<int>& gpus,
           NicTrafficLimits limits = {});

  /// The plan for the watched GPUs (assign_nics over the whole node, so the
  /// NICs are shared out as for a full node, then kept for these GPUs).
  const std::vector<topo::NicChoice>& plan() const { return m_plan; }

  /// Reads the counters; returns the map line, the variables line and what
  /// the counters allow.
  std::vector<std::string> start();

  /// Reads the counters again and judges the run. Before start(): the
  /// findings say there is no first reading.
  NicWatchResult finish() const;

 private:
  host::Sysroot m_fs;
  std::vector<topo::NicChoice> m_plan;
  NicTrafficLimits m_limits;
  std::optional<topo::NicCounterSnapshot> m_before;
};

/// "NIC map: GPU0 -> mlx5_0:1 (PIX), GPU1 -> mlx5_1:1 (PIX)"; a GPU without
/// a NIC shows "none".
std::string nic_map_line(const std::vector<topo::NicChoice>& plan);
/// "NIC env: NCCL_IB_HCA==mlx5_0:1,mlx5_1:1 per node; per rank NCCL_IB_HCA and
/// NVSHMEM_HCA_LIST = its GPU's NIC (GPU0 mlx5_0:1, ...);
/// DEEP_EP_DEVICE_TO_HCA_MAPPING=0:mlx5_0:1,...". Empty when no NIC is planned.
std::string nic_env_line(const std::vector<topo::NicChoice>& plan);
/// The post-run lines: bytes per NIC, then each finding with its evidence,
/// expected and fix.
std::vector<std::string> nic_summary_lines(const NicTrafficReport& report);

/// The snapshot index of the GPU at PCI address `bdf` ("0000:8A:00.0" as
/// cudaDeviceGetPCIBusId writes it matches "0000:8a:00.0"); nullopt if none.
std::optional<int> gpu_index_of_bdf(const topo::Snapshot& snap, const std::string& bdf);
/// The snapshot indices of the GPUs at these bus ids (one per local rank;
/// ranks sharing a GPU give it once), sorted; an invalid error naming the first
/// bus id the snapshot does not have.
Result<std::vector<int>> gpu_indices_of_bus_ids(const topo::Snapshot& snap,
                                                const std::vector<std::string>& bus_ids);

}  // namespace epkit::checks
