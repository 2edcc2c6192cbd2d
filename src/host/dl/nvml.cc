#include "host/dl/nvml.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cctype>
#include <cstdio>
#include <mutex>
#include <optional>

namespace epkit::host::dl {
std::string NvmlApi::describe(NvmlReturn rc) const {
  const char* text = error_string != nullptr ? error_string(rc) : nullptr;
  return fmt::format("NVML error {} ({})", rc, text != nullptr ? text : "no description");
}

Result<NvmlLibrary> open_nvml(const std::vector<std::string>& names) {
  auto lib = DlLibrary::open(names);
  if (!lib) return lib.error();
  NvmlLibrary out{std::move(*lib), {}};
  NvmlApi& api = out.api;
  const DlLibrary& l = out.library;
  for (auto err :
       {l.require(api.init, "nvmlInit_v2"), l.require(api.shutdown, "nvmlShutdown"),
        l.require(api.error_string, "nvmlErrorString"),
        l.require(api.device_get_count, "nvmlDeviceGetCount_v2"),
        l.require(api.device_get_handle_by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2"),
        l.require(api.device_get_name, "nvmlDeviceGetName"),
        l.require(api.device_get_uuid, "nvmlDeviceGetUUID"),
        l.require(api.device_get_nvlink_state, "nvmlDeviceGetNvLinkState"),
        l.require(api.device_get_nvlink_remote_pci_info, "nvmlDeviceGetNvLinkRemotePciInfo_v2"),
        l.require(api.device_get_p2p_status, "nvmlDeviceGetP2PStatus"),
        l.require(api.system_get_driver_version, "nvmlSystemGetDriverVersion")}) {
    if (err) return *err;
  }
  return out;
}

Result<const NvmlApi*> load_nvml() {
  static std::once_flag once;
  static std::optional<Result<NvmlLibrary>> loaded;
  std::call_once(
      once, [] { loaded.emplace(open_nvml(candidates("EPKIT_NVML_LIB", {"libnvidia-ml.so.1"}))); });
  if (!loaded->ok()) return loaded->error();
  return &loaded->value().api;
}

std::string normalize_bus_id(const std::string& bus_id) {
  unsigned domain = 0;
  unsigned bus = 0;
  unsigned dev = 0;
  unsigned fn = 0;
  char tail = 0;
  if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &dev, &fn, &tail) != 4) {
    std::string lower = bus_id;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return lower;
  }
  // All ones: the remote end is hidden (NVSwitches passed through to a VM
  // report "FFFFFFFF:FF:FF.0").
  if (domain == 0xffffffffu && bus == 0xff) return {};
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", domain, bus, dev, fn);
}

}  // namespace epkit::host::dl
