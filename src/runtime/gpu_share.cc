#include "runtime/gpu_share.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace epkit::runtime {

Result<DeviceChoice> choose_device(int local_rank, int local_world_size, int visible, bool share) {
  if (visible < 1) {
    return make_error(ErrorCode::unavailable, "no CUDA device is visible");
  }
  if (local_rank < 0 || local_world_size < 1 || local_rank >= local_world_size) {
    return make_error(ErrorCode::invalid, fmt::format("local rank {} of {} is not a rank",
                                                      local_rank, local_world_size));
  }
  if (!share && local_rank >= visible) {
    return make_error(
        ErrorCode::unavailable,
        fmt::format("local rank {} has no GPU: only {} visible (pass "
                    "--oversubscribe to let {} ranks share {} GPU{}, for checks)",
                    local_rank, visible, local_world_size, visible, visible == 1 ? "" : "s"));
  }
  DeviceChoice c;
  c.device = local_rank % visible;
  c.shared = local_world_size > visible;
  c.ranks_per_gpu = (local_world_size + visible - 1) / visible;
  return c;
}

std::string shared_gpu_nccl_host_id(const host::Env& env, const std::string& hostname, int rank) {
  std::string base = env.get_nonempty("NCCL_HOSTID").value_or(hostname);
  return fmt::format("{}-rank{}", base, rank);
}

Result<void> claim_nccl_host_identity(const host::Env& env, const std::string& hostname, int rank) {
  // NCCL reads its settings from the process environment, not from our Env
  // object.
  return host::set_process_env("NCCL_HOSTID", shared_gpu_nccl_host_id(env, hostname, rank));
}

MpsState detect_mps(const host::Env& env, const host::Sysroot& fs) {
  MpsState s;
  s.pipe_dir = env.get_nonempty("CUDA_MPS_PIPE_DIRECTORY").value_or("/tmp/nvidia-mps");
  s.running = fs.exists(s.pipe_dir + "/control");
  return s;
}

std::string shared_gpu_notice(int ranks, int gpus, const MpsState& mps) {
  std::string text = fmt::format(
      "GPUs shared (--oversubscribe): {} ranks on {} GPU{}, up to {} per GPU. Every check runs as "
      "on {} GPUs; timings are not representative (peer traffic is copies within one GPU).\n",
      ranks, gpus, gpus == 1 ? "" : "s", (ranks + gpus - 1) / gpus, ranks);
  if (mps.running) {
    text +=
        fmt::format("MPS is running ({}): the ranks' kernels run concurrently.\n", mps.pipe_dir);
  } else {
    text += fmt::format(
        "MPS is not running ({} has no control socket): the ranks' kernels will time-slice, "
        "several ms a step. Start it with `nvidia-cuda-mps-control -d` (stop: `echo quit | "
        "nvidia-cuda-mps-control`).\n",
        mps.pipe_dir);
  }
  return text;
}

}  // namespace epkit::runtime
