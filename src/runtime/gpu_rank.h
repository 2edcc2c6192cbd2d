// One rank of a GPU job: its device, the rendezvous store, the facts every
// rank exchanged, and (once started) its NCCL session. Shared by `epkit test`
// and `epkit bench nccl`; the CLI prints what these return.
#pragma once

#include <epkit/result.h>

#ifdef EPKIT_WITH_CUDA

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "host/dl/nccl.h"
#include "host/host.h"
#include "runtime/facts.h"
#include "runtime/launch.h"
#include "runtime/nccl_session.h"
#include "runtime/store.h"

namespace epkit::runtime {

struct GpuInfo {
  int device = 0;
  std::string name;
  std::string uuid;        // "GPU-8c1e..."
  std::string pci_bus_id;  // "0000:1b:00.0"
  int cc_major = 0;
  int cc_minor = 0;
  int driver_version = 0;   // cudaDriverGetVersion: 13000 = CUDA 13.0
  int runtime_version = 0;  // cudaRuntimeGetVersion
};

/// Visible CUDA devices; an unavailable error naming the cause (no driver,
/// no device, driver too old) instead of 0 when CUDA cannot start.
Result<int> cuda_device_count();
Result<GpuInfo> gpu_info(int device);
/// 13000 -> "13.0".
std::string cuda_version_string(int version);

struct GpuRank {
  LaunchInfo launch;
  const host::dl::NcclLibrary* nccl = nullptr;
  GpuInfo gpu;
  /// This node has more ranks than GPUs and this rank shares its GPU
  /// (runtime/gpu_share.h): NCCL sees it as a host of its own.
  bool shared_gpu = false;
  std::optional<StoreSession> rendezvous;  // set once joined
  Store& store() { return rendezvous->store; }
  std::vector<RankFacts> facts;  // every rank's, by rank
  std::vector<std::string> labels;  // "host:rank", by rank
  std::unique_ptr<NcclSession> session;
};

/// Checks the device and libnccl, connects to the store and exchanges facts.
/// NCCL itself is not started yet: the caller reports compare_facts first.
Result<std::unique_ptr<GpuRank>> join_gpu_job(const host::Host& host, const LaunchInfo& launch,
                                              Deadline deadline);
/// Starts the NCCL communicator of a joined rank.
Result<void> start_nccl(GpuRank& rank, Deadline deadline);

}  // namespace epkit::runtime

#endif
