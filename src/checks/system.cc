// container.* and kernel.* checks: the limits a container gives the process
// (/dev/shm, locked memory, CAP_IPC_LOCK) and the kernel modules GPU and RDMA
// work needs.
#include <fmt/format.h>
#include <sys/statvfs.h>

#include <cstdint>
#include <optional>
#include <sstream>

#include "checks/check.h"
#include "checks/check_util.h"

namespace epkit::checks {
namespace {

constexpr std::uint64_t k_gib = 1ull << 30;
constexpr int k_cap_ipc_lock = 14;

std::string human_bytes(std::uint64_t bytes) {
  if (bytes >= k_gib) return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / k_gib);
  return fmt::format("{} MiB", bytes >> 20);
}

std::optional<std::uint64_t> mem_total(const host::Sysroot& fs) {
  auto text = fs.read("/proc/meminfo");
  if (!text) return std::nullopt;
  std::istringstream lines(*text);
  std::string key;
  std::uint64_t kib = 0;
  while (lines >> key) {
    if (key == "MemTotal:" && lines >> kib) return kib * 1024;
    lines.ignore(1 << 20, '\n');
  }
  return std::nullopt;
}

// tmpfs size= option: a number with an optional k/m/g/t suffix or a % of RAM.
std::optional<std::uint64_t> tmpfs_size(std::string_view option, const host::Sysroot& fs) {
  std::string text(option);
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  unsigned long long number = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str()) return std::nullopt;
  std::string_view suffix(end);
  if (suffix == "%") {
    auto total = mem_total(fs);
    if (!total) return std::nullopt;
    return *total / 100 * number;
  }
  if (suffix.empty()) return number;
  if (suffix.size() != 1) return std::nullopt;
  switch (suffix.front()) {
    case 'k':
    case 'K':
      return number << 10;
    case 'm':
    case 'M':
      return number << 20;
    case 'g':
    case 'G':
      return number << 30;
    case 't':
    case 'T':
      return number << 40;
    default:
      return std::nullopt;
  }
}

struct ShmSize {
  std::optional<std::uint64_t> bytes;
  std::string value;   // what was read
  std::string source;  // where
};

// /dev/shm's size: the last /dev/shm line of /proc/self/mounts (mounts stack),
// else statvfs() on the live node.
ShmSize shm_size(const host::Sysroot& fs) {
  ShmSize out;
  if (auto mounts = fs.read("/proc/self/mounts")) {
    std::istringstream lines(*mounts);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string device, mount_point, type, options;
      if (!(fields >> device >> mount_point >> type >> options) || mount_point != "/dev/shm") {
        continue;
      }
      out.source = "/proc/self/mounts";
      out.value = fmt::format("{} {}", type, options);
      out.bytes.reset();
      std::string size_option;
      std::istringstream opts(options);
      std::string opt;
      while (std::getline(opts, opt, ',')) {
        if (opt.starts_with("size=")) size_option = opt.substr(5);
      }
      if (!size_option.empty()) {
        out.bytes = tmpfs_size(size_option, fs);
      } else if (type == "tmpfs") {
        // tmpfs without size= gets half of RAM.
        if (auto total = mem_total(fs)) out.bytes = *total / 2;
      }
    }
  }
  if (!out.source.empty() || !fs.is_live()) return out;
  struct statvfs st {};
  if (::statvfs("/dev/shm", &st) == 0) {
    out.bytes = static_cast<std::uint64_t>(st.f_blocks) * st.f_frsize;
    out.value = human_bytes(*out.bytes);
    out.source = "statvfs(/dev/shm)";
  }
  return out;
}

// "Max locked memory  <soft> <hard> bytes" of /proc/self/limits: the soft
// limit, nullopt meaning unlimited.
Result<std::optional<std::uint64_t>> memlock_limit(const host::Sysroot& fs, std::string* raw) {
  auto line = read_keyed_line(fs, "/proc/self/limits", "Max locked memory");
  if (!line) return line.error();
  std::istringstream fields(*line);
  fields >> *raw;
  if (*raw == "unlimited") return std::optional<std::uint64_t>();
  char* end = nullptr;
  std::uint64_t value = std::strtoull(raw->c_str(), &end, 10);
  if (end == raw->c_str() || *end != '\0') {
    return make_error(
        ErrorCode::invalid,
        fmt::format("/proc/self/limits: locked-memory limit '{}' is no number", *raw));
  }
  return std::optional<std::uint64_t>(value);
}

// Bit 14 (CAP_IPC_LOCK) of CapEff in /proc/self/status.
Result<bool> has_ipc_lock(const host::Sysroot& fs, std::string* raw) {
  auto line = read_keyed_line(fs, "/proc/self/status", "CapEff:");
  if (!line) return line.error();
  *raw = *line;
  char* end = nullptr;
  unsigned long long caps = std::strtoull(raw->c_str(), &end, 16);
  if (end == raw->c_str() || *end != '\0') {
    return make_error(ErrorCode::invalid,
                      fmt::format("/proc/self/status: CapEff '{}' is no hex number", *raw));
  }
  return ((caps >> k_cap_ipc_lock) & 1) != 0;
}

Outcome check_limits(const Context& ctx) {
  const auto& fs = ctx.host.fs();
  std::size_t gpus = ctx.topo.gpus.size();
  bool rdma = !ctx.topo.nics.empty();
  Findings f;

  ShmSize shm = shm_size(fs);
  f.evidence("/dev/shm", shm.source.empty() ? "not found as a mount" : shm.value,
             shm.source.empty() ? "/proc/self/mounts" : shm.source);
  std::string memlock_raw;
  auto memlock = memlock_limit(fs, &memlock_raw);
  f.evidence("Max locked memory", memlock ? memlock_raw : memlock.error().message,
             "/proc/self/limits");
  std::string cap_raw;
  auto ipc_lock = has_ipc_lock(fs, &cap_raw);
  f.evidence("CapEff", ipc_lock ? cap_raw : ipc_lock.error().message, "/proc/self/status");

  if (gpus == 0 && !rdma) {
    Outcome out = f.finish("");
    out.status = Status::skip;
    out.summary = "no GPUs and no RDMA devices: container limits do not matter here";
    out.expected.clear();
    out.fix.clear();
    return out;
  }

  if (gpus > 1) {
    if (!shm.bytes) {
      f.add(Status::unknown, "could not tell the size of /dev/shm");
    } else if (*shm.bytes < k_gib) {
      f.add(Status::warn,
            fmt::format("/dev/shm is {} with {} GPUs: NCCL's shared-memory transport runs out of "
                        "space ('No space left on device')",
                        human_bytes(*shm.bytes), gpus),
            "/dev/shm of at least 1 GiB",
            "docker run --shm-size=16g (or --ipc=host); Kubernetes: mount an emptyDir with "
            "medium: Memory at /dev/shm");
    }
  }

  if (rdma) {
    if (!memlock || !ipc_lock) {
      f.add(Status::unknown,
            fmt::format("could not read the locked-memory limit or capabilities: {}",
                        !memlock ? memlock.error().message : ipc_lock.error().message));
    } else if (memlock->has_value() && !*ipc_lock) {
      // The kernel lets RDMA pin memory past RLIMIT_MEMLOCK only for holders
      // of CAP_IPC_LOCK, so either one is enough.
      f.add(Status::fail,
            fmt::format("locked memory is limited to {} and the process lacks CAP_IPC_LOCK: RDMA "
                        "memory registration fails ('ibv_reg_mr ... Cannot allocate memory')",
                        human_bytes(**memlock)),
            "RLIMIT_MEMLOCK unlimited, or CAP_IPC_LOCK",
            "docker run --ulimit memlock=-1 (or --cap-add IPC_LOCK); Kubernetes: "
            "securityContext.capabilities.add: [\"IPC_LOCK\"]");
    }
  }
  return f.finish("the limits of this process allow GPU and RDMA work");
}

Outcome check_modules(const Context& ctx) {
  if (ctx.topo.gpus.empty()) return skip("no GPUs on this node");
  const auto& fs = ctx.host.fs();
  const auto& env = ctx.host.env();
  const std::string src = env_source(env);
  auto modules = read_proc_modules(fs);
  if (!modules)
    return unknown(fmt::format("cannot list kernel modules: {}", modules.error().message));
  Findings f;
  auto state = [&](std::string_view name) {
    ModuleState s = module_state(fs, modules, name);
    f.evidence(std::string(name), s.loaded ? "loaded" : "not loaded", s.source);
    return s.loaded;
  };
  for (std::string_view name : {"nvidia", "nvidia_uvm"}) {
    if (!state(name)) {
      f.add(Status::fail, fmt::format("{} is not loaded: CUDA cannot use the GPUs", name),
            fmt::format("{} loaded", name), fmt::format("modprobe {}", name));
    }
  }

  if (!ctx.topo.nics.empty()) {
    bool peermem = state("nvidia_peermem") || state("nv_peer_mem");
    auto dmabuf = env.get_nonempty("NCCL_DMABUF_ENABLE");
    auto nvpeermem = env.get_nonempty("USE_NVPEERMEM");
    if (dmabuf) f.evidence("NCCL_DMABUF_ENABLE", *dmabuf, src);
    if (nvpeermem) f.evidence("USE_NVPEERMEM", *nvpeermem, src);
    std::vector<std::string> needs;
    if (ibgda_requested(env)) needs.push_back("NVSHMEM IBGDA");
    if (nvpeermem && truthy(*nvpeermem)) needs.push_back("USE_NVPEERMEM=" + *nvpeermem);
    if (dmabuf && *dmabuf == "0") needs.push_back("NCCL_DMABUF_ENABLE=0");
    if (!peermem && !needs.empty()) {
      std::string why;
      for (const auto& n : needs) why += (why.empty() ? "" : ", ") + n;
      f.add(Status::fail,
            fmt::format("nvidia_peermem is not loaded but the configuration ({}) needs GPUDirect "
                        "RDMA through it",
                        why),
            "nvidia_peermem loaded",
            "modprobe nvidia_peermem (GPU Operator: driver.rdma.enabled=true)");
    } else if (!peermem) {
      f.add(Status::pass, "no nvidia_peermem: GPUDirect RDMA relies on DMA-BUF");
    }
  }

  auto use_gdrcopy = env.get_nonempty("NVSHMEM_USE_GDRCOPY");
  auto gdrcopy_home = env.get_nonempty("GDRCOPY_HOME");
  if ((use_gdrcopy && truthy(*use_gdrcopy)) || gdrcopy_home) {
    if (!state("gdrdrv")) {
      bool required = use_gdrcopy && truthy(*use_gdrcopy);
      f.add(required ? Status::fail : Status::warn,
            fmt::format("gdrdrv is not loaded but {} asks for GDRCopy",
                        required ? "NVSHMEM_USE_GDRCOPY" : "GDRCOPY_HOME"),
            "gdrdrv loaded (GPU Operator: gdrcopy.enabled=true)",
            required ? "modprobe gdrdrv, or unset NVSHMEM_USE_GDRCOPY"
                     : "modprobe gdrdrv, or unset GDRCOPY_HOME");
    }
  }
  return f.finish("the GPU kernel modules are loaded");
}

constexpr Check k_checks[] = {
    {"container.limits", "/dev/shm, locked memory and CAP_IPC_LOCK suit GPU and RDMA work",
     &check_limits},
    {"kernel.modules", "the GPU, peer-memory and GDRCopy kernel modules are loaded",
     &check_modules},
};

}  // namespace

std::span<const Check> system_checks() {
  return k_checks;
}

}  // namespace epkit::checks
