// nvshmem.* checks: what NVSHMEM's IBGDA transport needs from the driver and
// the node for the NIC handler the environment asks for.
#include <fmt/format.h>

#include <cstdlib>
#include <sstream>

#include "checks/check.h"
#include "checks/check_util.h"

namespace epkit::checks {
namespace {

constexpr std::string_view k_params = "/proc/driver/nvidia/params";
constexpr const char* k_peer_mapping_fix =
    "add the driver option (echo 'options nvidia NVreg_RegistryDwords=\"PeerMappingOverride=1;\"' "
    ">> /etc/modprobe.d/nvidia.conf) and reload the nvidia modules (GKE: privileged pod or a "
    "custom driver install)";

// The RegistryDwords value of /proc/driver/nvidia/params, unquoted ("" when
// the line is missing).
std::string registry_dwords(const std::string& params_value) {
  std::string value = params_value;
  if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
    value = value.substr(1, value.size() - 2);
  }
  return value;
}

// Whether RegistryDwords ("Key=Value;Key=Value") sets PeerMappingOverride to
// a non-zero number.
bool peer_mapping_override(const std::string& dwords) {
  std::istringstream items(dwords);
  std::string item;
  while (std::getline(items, item, ';')) {
    auto eq = item.find('=');
    if (eq == std::string::npos) continue;
    if (!iequals(trim(item.substr(0, eq)), "PeerMappingOverride")) continue;
    std::string value = trim(item.substr(eq + 1));
    char* end = nullptr;
    unsigned long number = std::strtoul(value.c_str(), &end, 0);
    if (end != value.c_str() && number != 0) return true;
  }
  return false;
}

// Google Cloud VMs name themselves in DMI.
bool on_gcp(const host::Sysroot& fs, Findings& f) {
  auto vendor = fs.read_trimmed("/sys/class/dmi/id/sys_vendor");
  auto product = fs.read_trimmed("/sys/class/dmi/id/product_name");
  if (vendor) f.evidence("sys_vendor", *vendor, "/sys/class/dmi/id/sys_vendor");
  if (product) f.evidence("product_name", *product, "/sys/class/dmi/id/product_name");
  return (vendor && *vendor == "Google") || (product && *product == "Google Compute Engine");
}

void check_gpu_handler(const host::Sysroot& fs, const std::string& handler, bool gcp, Findings& f) {
  auto params = read_keyed_line(fs, k_params, "RegistryDwords:");
  if (!params && params.error().code != ErrorCode::invalid) {
    f.add(Status::unknown,
          fmt::format("cannot tell whether the GPU NIC handler can map the NIC doorbells: {}",
                      params.error().message));
    return;
  }
  std::string dwords = registry_dwords(params.value_or(std::string()));
  f.evidence("RegistryDwords", dwords.empty() ? "(empty)" : dwords, std::string(k_params));
  if (peer_mapping_override(dwords)) return;
  std::string expected = "RegistryDwords containing PeerMappingOverride=1";
  if (handler == "gpu") {
    f.add(Status::fail,
          "NVSHMEM_IBGDA_NIC_HANDLER=gpu but the driver lacks PeerMappingOverride=1: the GPU "
          "cannot map the NIC's doorbell ('cudaHostRegister with IoMemory failed')",
          expected, k_peer_mapping_fix);
  } else if (gcp) {
    f.add(Status::fail,
          "IBGDA NIC handler auto: without PeerMappingOverride=1 NVSHMEM falls back to the CPU "
          "handler, under which internode dispatch hangs on Google Cloud",
          expected, k_peer_mapping_fix);
  } else {
    f.add(Status::warn,
          "IBGDA NIC handler auto: without PeerMappingOverride=1 NVSHMEM (>= 3.4) falls back to "
          "CPU-assisted IBGDA, which is slower",
          expected, k_peer_mapping_fix);
  }
}

Outcome check_ibgda(const Context& ctx) {
  const auto& env = ctx.host.env();
  const auto& fs = ctx.host.fs();
  const std::string src = env_source(env);
  if (env.names_with_prefix("NVSHMEM_").empty()) return skip("no NVSHMEM_* variables set");
  Findings f;
  for (const char* name :
       {"NVSHMEM_IB_ENABLE_IBGDA", "NVSHMEM_REMOTE_TRANSPORT", "NVSHMEM_IBGDA_NIC_HANDLER",
        "NVSHMEM_USE_GDRCOPY", "NVSHMEM_DISABLE_GDRCOPY"}) {
    if (auto value = env.get(name)) f.evidence(name, *value, src);
  }
  bool ibgda_flag = nvshmem_bool(env.get("NVSHMEM_IB_ENABLE_IBGDA"));
  bool transport_ibgda = iequals(trim(env.get("NVSHMEM_REMOTE_TRANSPORT").value_or("")), "ibgda");
  bool requested = ibgda_requested(env);
  if (transport_ibgda && !ibgda_flag) {
    f.add(Status::fail,
          "NVSHMEM_REMOTE_TRANSPORT=ibgda names no proxy transport (ibrc, ucx, ibdevx, "
          "libfabric, none), so NVSHMEM loads none, and IBGDA stays off without "
          "NVSHMEM_IB_ENABLE_IBGDA",
          "NVSHMEM_IB_ENABLE_IBGDA=1 alongside NVSHMEM_REMOTE_TRANSPORT=ibgda",
          "export NVSHMEM_IB_ENABLE_IBGDA=1");
  }
  auto modules = read_proc_modules(fs);
  ModuleState gdrdrv = module_state(fs, modules, "gdrdrv");
  f.evidence("gdrdrv", gdrdrv.loaded ? "loaded" : "not loaded", gdrdrv.source);
  bool gcp = on_gcp(fs, f);

  if (requested && ctx.topo.nics.empty()) {
    f.add(Status::warn,
          "IBGDA is requested but the node shows no RDMA devices: NVSHMEM finds no device for "
          "GPU-initiated communication and works within the node only",
          "RDMA devices under /sys/class/infiniband",
          "expose the RDMA devices (/dev/infiniband) to the container");
  }
  if (requested) {
    std::string handler = to_lower(trim(env.get("NVSHMEM_IBGDA_NIC_HANDLER").value_or("auto")));
    // NVSHMEM removes blanks and lower-cases before comparing.
    std::erase_if(handler, [](char c) { return c == ' ' || c == '\t'; });
    if (handler == "gpu" || handler == "auto") {
      check_gpu_handler(fs, handler, gcp, f);
    } else if (handler == "cpu" || handler == "cpu_host_memory") {
      if (gcp) {
        f.add(Status::fail,
              fmt::format("NVSHMEM_IBGDA_NIC_HANDLER={} on Google Cloud: internode dispatch hangs "
                          "under the CPU NIC handler",
                          handler),
              "NVSHMEM_IBGDA_NIC_HANDLER=gpu", "export NVSHMEM_IBGDA_NIC_HANDLER=gpu");
      }
      if (handler == "cpu" && !gdrdrv.loaded) {
        f.add(Status::fail,
              "NVSHMEM_IBGDA_NIC_HANDLER=cpu rings doorbells through GDRCopy but the gdrdrv "
              "module is not loaded",
              "gdrdrv loaded", "modprobe gdrdrv (or export NVSHMEM_IBGDA_NIC_HANDLER=gpu)");
      }
    } else {
      f.add(Status::fail,
            fmt::format("NVSHMEM_IBGDA_NIC_HANDLER={} is not a value NVSHMEM accepts: IBGDA "
                        "fails to initialise",
                        handler),
            "one of auto, gpu, cpu, cpu_host_memory", "export NVSHMEM_IBGDA_NIC_HANDLER=gpu");
    }
  }

  bool gdrcopy_wanted = truthy(env.get("NVSHMEM_USE_GDRCOPY").value_or("")) &&
                        !nvshmem_bool(env.get("NVSHMEM_DISABLE_GDRCOPY"));
  if (gdrcopy_wanted && !gdrdrv.loaded) {
    if (!modules) {
      f.add(Status::unknown, fmt::format("NVSHMEM_USE_GDRCOPY is set and gdrdrv's state is "
                                         "unknown: {}",
                                         modules.error().message));
    } else {
      f.add(Status::fail, "NVSHMEM_USE_GDRCOPY is set but the gdrdrv module is not loaded",
            "gdrdrv loaded (GPU Operator: gdrcopy.enabled)",
            "modprobe gdrdrv, or export NVSHMEM_DISABLE_GDRCOPY=1");
    }
  }
  auto build_switch = env.get_nonempty("NVSHMEM_IBGDA_SUPPORT");
  if (!requested && build_switch && truthy(*build_switch)) {
    f.add(Status::pass,
          "NVSHMEM_IBGDA_SUPPORT is a build switch and does nothing at run time; IBGDA runs when "
          "NVSHMEM_IB_ENABLE_IBGDA=1 (DeepEP's Buffer sets it itself)");
  }
  return f.finish(requested ? "IBGDA's NIC handler has what it needs"
                            : "IBGDA not requested (NVSHMEM_IB_ENABLE_IBGDA unset)");
}

constexpr Check k_checks[] = {
    {"nvshmem.ibgda", "NVSHMEM IBGDA's NIC handler has driver and module support", &check_ibgda},
};

}  // namespace

std::span<const Check> nvshmem_checks() {
  return k_checks;
}

}  // namespace epkit::checks
