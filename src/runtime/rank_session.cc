#include "runtime/rank_session.h"

#ifdef EPKIT_WITH_CUDA
#include <fmt/format.h>

#include <sstream>

#include "host/dl/nccl.h"
#include "runtime/gpu_share.h"
#endif

namespace epkit::runtime {

void RankIo::line(const std::string& text) const {
  last_line = text;
  out << prefix << text << "\n";
  out.flush();
}

int exit_code_for(const Error& error) {
  switch (error.code) {
    case ErrorCode::timeout:
      return k_gpu_timeout;
    case ErrorCode::unavailable:
      return k_gpu_peer_lost;
    case ErrorCode::nccl:
    case ErrorCode::cuda:
      return k_gpu_nccl_error;
    default:
      return k_gpu_nccl_error;
  }
}

#ifdef EPKIT_WITH_CUDA
int open_gpu_rank(const host::Host& host, const LaunchInfo& launch, RankIo& io, double timeout_s,
                  std::unique_ptr<GpuRank>& out) {
  auto fail = [&](int code, const std::string& why) {
    io.line("FAIL: " + why);
    return code;
  };
  auto count = cuda_device_count();
  if (!count) return fail(k_gpu_unavailable, count.error().message);
  if (auto device =
          choose_device(launch.local_rank, launch.local_world_size, *count, launch.share_gpus);
      !device) {
    return fail(k_gpu_unavailable, device.error().message);
  }
  if (auto nccl = host::dl::load_nccl(); !nccl) {
    return fail(k_gpu_unavailable, "NCCL cannot be loaded: " + nccl.error().message);
  }
  auto joined = join_gpu_job(host, launch, Deadline::after_seconds(timeout_s));
  if (!joined) return fail(exit_code_for(joined.error()), joined.error().message);
  if (launch.rank == 0 && (*joined)->shared_gpu && launch.launcher != Launcher::epkit_spawn) {
    // Ranks another launcher started: no epkit agent said it for them.
    std::istringstream lines(
        shared_gpu_notice(launch.local_world_size, *count, detect_mps(host.env(), host.fs())));
    for (std::string l; std::getline(lines, l);) io.line(l);
  }
  if (launch.rank == 0) {
    for (const auto& m : compare_facts((*joined)->facts)) {
      io.line(fmt::format("mismatch ({}): {}", to_string(m.kind), m.summary));
    }
  }
  if (auto started = start_nccl(**joined, Deadline::after_seconds(timeout_s)); !started) {
    return fail(exit_code_for(started.error()), started.error().message);
  }
  out = std::move(*joined);
  return k_gpu_ok;
}

int close_gpu_rank(GpuRank& rank, RankIo& io, const std::string& barrier, double timeout_s,
                   int code) {
  auto step = [&] { return Deadline::after_seconds(timeout_s); };
  if (auto done = rank.store().barrier(barrier, step()); !done) {
    io.line("FAIL: " + done.error().message);
    return exit_code_for(done.error());
  }
  if (auto closed = rank.session->close(step()); !closed) {
    io.line("FAIL: " + closed.error().message);
    return exit_code_for(closed.error());
  }
  rank.store().close();
  return code;
}
#endif

}  // namespace epkit::runtime
