// rdma.gpudirect: GPUDirect RDMA is available (peer memory or DMA-BUF).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "checks/rdma_common.h"
#include "host/dl/ibverbs.h"
#include "host/elf.h"
#include "host/libsearch.h"

namespace epkit::checks::rdma {

namespace {

// ---- rdma.gpudirect --------------------------------------------------------

// "6.14.0-1021-gcp" >= 5.12
std::optional<bool> kernel_at_least(std::string_view release, int major, int minor) {
  auto parts = host::split_any(release.substr(0, release.find_first_not_of("0123456789.")), ".");
  if (parts.size() < 2) return std::nullopt;
  auto ma = parse_integer(parts[0]);
  auto mi = parse_integer(parts[1]);
  if (!ma || !mi) return std::nullopt;
  return *ma > major || (*ma == major && *mi >= minor);
}

}  // namespace

Outcome check_gpudirect(const Context& ctx) {
  if (ctx.topo.gpus.empty()) return skip("no GPU");
  if (ctx.topo.nics.empty()) return skip("no RDMA device");
  const auto& fs = ctx.host.fs();
  const auto& env = ctx.host.env();
  Verdict v;

  // Peer memory, as NCCL probes it (NVSHMEM also accepts the nvidia-peermem
  // memory_peers entry).
  std::string peermem;
  for (const char* path :
       {"/sys/kernel/mm/memory_peers/nv_mem/version",
        "/sys/kernel/mm/memory_peers/nv_mem_nc/version", "/sys/module/nvidia_peermem/version"}) {
    if (fs.exists(path)) {
      peermem = path;
      break;
    }
  }
  bool nvshmem_only_peermem =
      peermem.empty() && fs.exists("/sys/kernel/mm/memory_peers/nvidia-peermem/version");
  v.add("peer memory", peermem.empty() ? "absent" : "present",
        peermem.empty() ? "/sys/module/nvidia_peermem" : peermem);

  // DMA-BUF: every requirement we can read from files.
  std::vector<std::string> missing;
  std::vector<std::string> undetermined;
  auto dmabuf_env = env.get_nonempty("NCCL_DMABUF_ENABLE");
  if (dmabuf_env) v.add("NCCL_DMABUF_ENABLE", *dmabuf_env, env.origin());
  if (dmabuf_env && *dmabuf_env == "0") missing.push_back("NCCL_DMABUF_ENABLE=0");
  if (auto release = fs.read_trimmed("/proc/sys/kernel/osrelease")) {
    v.add("kernel", *release, "/proc/sys/kernel/osrelease");
    auto ok = kernel_at_least(*release, 5, 12);
    if (!ok) {
      undetermined.push_back("kernel release " + *release + " not understood");
    } else if (!*ok) {
      missing.push_back("kernel " + *release + " < 5.12");
    }
  } else {
    undetermined.push_back("no /proc/sys/kernel/osrelease");
  }
  if (auto version = fs.read("/proc/driver/nvidia/version")) {
    std::string first_line = version->substr(0, version->find('\n'));
    bool open = first_line.find("Open Kernel Module") != std::string::npos;
    v.add("NVIDIA kernel module", open ? "open" : "proprietary", "/proc/driver/nvidia/version");
    if (!open) missing.push_back("proprietary NVIDIA kernel module (DMA-BUF needs the open one)");
  } else {
    undetermined.push_back("no /proc/driver/nvidia/version");
  }
  auto verbs = host::find_library(fs, env, k_verbs_soname);
  if (!verbs.empty()) {
    if (auto elf = host::read_elf(fs, verbs.front().real_path)) {
      bool has = elf->defines("IBVERBS_1.12");  // ibv_reg_dmabuf_mr's version
      v.add("ibv_reg_dmabuf_mr", has ? "IBVERBS_1.12 defined" : "absent", verbs.front().real_path);
      if (!has)
        missing.push_back(verbs.front().real_path + " predates ibv_reg_dmabuf_mr (IBVERBS_1.12)");
    }
  }
  bool dmabuf = missing.empty() && undetermined.empty();

  std::string policy;
  if (auto level = env.get_nonempty("NCCL_NET_GDR_LEVEL")) {
    v.add("NCCL_NET_GDR_LEVEL", *level, env.origin());
    policy = fmt::format(
        "; NCCL_NET_GDR_LEVEL={} limits GPUDirect RDMA to GPU/NIC pairs within that PCIe distance",
        *level);
    if (*level == "LOC" || *level == "0") {
      v.note(Status::warn,
             fmt::format("NCCL_NET_GDR_LEVEL={} turns GPUDirect RDMA off in NCCL", *level),
             "NCCL_NET_GDR_LEVEL unset or PIX/PXB", "unset NCCL_NET_GDR_LEVEL");
    }
  }

  if (!peermem.empty()) {
    if (!dmabuf && !missing.empty())
      v.add("DMA-BUF", fmt::format("{}", fmt::join(missing, "; ")), "");
    return v.finish(fmt::format("GPUDirect RDMA through peer memory ({}){}", peermem, policy));
  }
  if (dmabuf) {
    return v.finish(fmt::format(
        "GPUDirect RDMA through DMA-BUF (open module, kernel >= 5.12){}; NCCL also needs "
        "CUDA >= 11.7 and the GPU's DMA-BUF attribute, checked at run time",
        policy));
  }
  std::string why = fmt::format("{}", fmt::join(missing.empty() ? undetermined : missing, "; "));
  if (nvshmem_only_peermem) {
    v.note(Status::warn,
           "only /sys/kernel/mm/memory_peers/nvidia-peermem is present: NVSHMEM uses it, NCCL "
           "looks for "
           "nv_mem or /sys/module/nvidia_peermem",
           "nvidia_peermem loaded", "modprobe nvidia_peermem");
    return v.finish("");
  }
  // FAIL only on a requirement seen to be unmet; a tree that lacks the files
  // to judge DMA-BUF is UNKNOWN.
  bool definite = !missing.empty();
  v.note(
      definite ? Status::fail : Status::unknown,
      definite
          ? fmt::format(
                "no GPUDirect RDMA: no peer-memory module (/sys/module/nvidia_peermem/version "
                "absent) and no DMA-BUF ({}); NCCL stages through host memory",
                why)
          : fmt::format("GPUDirect RDMA undetermined: no peer-memory module and DMA-BUF cannot be "
                        "judged ({})",
                        why),
      "nvidia_peermem loaded, or DMA-BUF (open NVIDIA module, kernel >= 5.12, NCCL_DMABUF_ENABLE "
      "not 0)",
      "modprobe nvidia_peermem (GPU Operator: driver.rdma.enabled=true), or meet the DMA-BUF "
      "requirements");
  return v.finish("");
}

}  // namespace epkit::checks::rdma
