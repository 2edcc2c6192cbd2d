#include "host/dl/nvml.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cctype>
#include <cstdio>
#include <mutex>
#include <optional>

namespace epkit::host::dl {
namespace {

// Binds one required entry point or returns the error naming it.
template <typename Fn>
std::optional<Error> bind_required(const DlLibrary& lib, Fn*& slot, const char* name) {
  dlerror();
  if (lib.bind(slot, name)) return std::nullopt;
  const char* why = dlerror();
  return make_error(ErrorCode::unavailable, fmt::format("{} lacks {}: {}", lib.name(), name,
                                                        why != nullptr ? why : "symbol not found"));
}

}  // namespace

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
       {bind_required(l, api.init, "nvmlInit_v2"), bind_required(l, api.shutdown, "nvmlShutdown"),
        bind_required(l, api.error_string, "nvmlErrorString"),
        bind_required(l, api.device_get_count, "nvmlDeviceGetCount_v2"),
        bind_required(l, api.device_get_handle_by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2"),
        bind_required(l, api.device_get_name, "nvmlDeviceGetName"),
        bind_required(l, api.device_get_uuid, "nvmlDeviceGetUUID"),
        bind_required(l, api.device_get_nvlink_state, "nvmlDeviceGetNvLinkState"),
        bind_required(l, api.device_get_nvlink_remote_pci_info,
                      "nvmlDeviceGetNvLinkRemotePciInfo_v2"),
        bind_required(l, api.device_get_p2p_status, "nvmlDeviceGetP2PStatus"),
        bind_required(l, api.system_get_driver_version, "nvmlSystemGetDriverVersion")}) {
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
