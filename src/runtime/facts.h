// What each rank knows about itself, exchanged through the store before NCCL
// starts, and the comparison that names heterogeneous ranks: differing NCCL
// versions, one GPU used twice on a host, NCCL_*/NVSHMEM_* settings or HCA
// sets that differ between nodes. These cause silent hangs later, so they are
// reported up front.
#pragma once

#include <epkit/result.h>

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "host/env.h"
#include "host/host.h"
#include "runtime/deadline.h"

namespace epkit::runtime {

class Store;

struct RankFacts {
  int rank = 0;
  int local_rank = 0;
  std::string host;
  /// Which node this rank belongs to for the comparisons: NCCL_HOSTID when
  /// set (how one host fakes several nodes), else the host name.
  std::string host_id;
  std::string gpu_uuid;    // "GPU-8c1e..."; filled by the GPU layer
  std::string pci_bus_id;  // "0000:1b:00.0"; filled by the GPU layer
  std::string driver_version;
  std::string cuda_version;
  std::string nccl_version;
  std::string nccl_library;  // path of the libnccl that was loaded
  /// NCCL_* and NVSHMEM_* variables as this rank sees them.
  std::map<std::string, std::string> network_env;
  /// RDMA devices present on the host (sorted names, e.g. mlx5_0).
  std::vector<std::string> hcas;
  /// The rank shares its GPU on purpose (--oversubscribe): not a
  /// duplicate_gpu mismatch.
  bool shared_gpu = false;
};

std::string facts_to_json(const RankFacts& facts);
/// Parses what facts_to_json wrote; bad input is an invalid error.
Result<RankFacts> facts_from_json(std::string_view text);

/// NCCL_* and NVSHMEM_* variables of env (non-empty ones, as NCCL reads them).
/// NCCL_HOSTID is left out: it names the node and differs by design.
std::map<std::string, std::string> network_env(const host::Env& env);

/// The host-level facts: host name, driver version, RDMA devices and network
/// environment, read through the sysroot. GPU, CUDA and NCCL fields are left
/// for the caller (they need the device).
RankFacts collect_host_facts(const host::Host& host, int rank, int local_rank);

enum class MismatchKind {
  nccl_version,
  cuda_version,
  driver_version,
  duplicate_gpu,
  network_env,
  hca_set
};
const char* to_string(MismatchKind kind);

struct Mismatch {
  MismatchKind kind;
  /// Names the ranks as host:rank and the differing values.
  std::string summary;
  /// The ranks to blame: the minority side, or every rank sharing a GPU.
  std::vector<int> ranks;
};

std::vector<Mismatch> compare_facts(const std::vector<RankFacts>& facts);

/// Publishes this rank's facts under "facts/<rank>" and returns everyone's,
/// in rank order.
Result<std::vector<RankFacts>> exchange_facts(Store& store, const RankFacts& mine, int world_size,
                                              Deadline deadline);

}  // namespace epkit::runtime
