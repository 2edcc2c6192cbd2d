// Several ranks on one GPU (`--oversubscribe`): which device a rank takes,
// what NCCL needs to accept two ranks on one device, and whether MPS lets
// their kernels run at once.
//
// This is how every GPU check runs on a machine with fewer GPUs than ranks:
// the ranks of a node share its GPUs round-robin. Results are checked exactly
// as on distinct GPUs; timings are not representative (the "NVLink" traffic
// is copies within one GPU's memory). The same functions serve epkit's node
// agents, ranks started by another launcher, and the Python package's ranks.
#pragma once

#include <epkit/result.h>

#include <string>

#include "host/env.h"
#include "host/sysroot.h"

namespace epkit::runtime {

/// The variable through which a node agent (or a user) tells its ranks that
/// they may share GPUs.
inline constexpr const char* k_share_gpus_var = "EPKIT_SHARE_GPUS";

struct DeviceChoice {
  int device = 0;
  /// More ranks than GPUs on this node: some GPU holds several ranks.
  bool shared = false;
  /// The most ranks any GPU of this node holds.
  int ranks_per_gpu = 1;
};

/// Local rank `local_rank` of `local_world_size` on a node with `visible`
/// GPUs. Without `share`, a rank beyond the last GPU is an error that names
/// --oversubscribe; with it, ranks take GPUs round-robin.
Result<DeviceChoice> choose_device(int local_rank, int local_world_size, int visible, bool share);

/// NCCL refuses two ranks of one communicator on one GPU of one host
/// ("Duplicate GPU detected"), and tells hosts apart by NCCL_HOSTID. A rank
/// on a shared GPU therefore presents itself as its own host: the given
/// NCCL_HOSTID (a faked node's) or the host name, plus "-rank<N>". NCCL then
/// connects such ranks over its network transport (sockets without NICs).
std::string shared_gpu_nccl_host_id(const host::Env& env, const std::string& hostname, int rank);

/// Sets NCCL_HOSTID in this process for a rank on a shared GPU (NCCL reads it
/// at its first communicator). Must run before NCCL starts.
Result<void> claim_nccl_host_identity(const host::Env& env, const std::string& hostname, int rank);

/// Whether an MPS control daemon is running for this process's CUDA clients:
/// its pipe directory (CUDA_MPS_PIPE_DIRECTORY, default /tmp/nvidia-mps)
/// holds the `control` socket.
struct MpsState {
  bool running = false;
  std::string pipe_dir;
};
MpsState detect_mps(const host::Env& env, const host::Sysroot& fs);

/// The lines a node agent prints before its ranks start on shared GPUs: what
/// is shared, that timings mean nothing, and whether kernels will time-slice
/// (with the command that starts MPS).
std::string shared_gpu_notice(int ranks, int gpus, const MpsState& mps);

}  // namespace epkit::runtime
