// Typed wrapper over libnvidia-ml, opened with dlopen (see library.h).
//
// Only the few NVML types epkit uses are declared here, with the values and
// layouts of nvml.h, so that no NVIDIA header is needed to build. Every entry
// point is the versioned one the current library exports (_v2 where NVML has
// one).
#pragma once

#include <epkit/result.h>

#include <string>
#include <vector>

#include "host/dl/library.h"

namespace epkit::host::dl {

using NvmlReturn = int;  // nvmlReturn_t
inline constexpr NvmlReturn k_nvml_success = 0;
inline constexpr NvmlReturn k_nvml_error_not_supported = 3;

struct NvmlDeviceOpaque;
using NvmlDevice = NvmlDeviceOpaque*;  // nvmlDevice_t

using NvmlEnableState = int;  // nvmlEnableState_t: 0 disabled, 1 enabled
inline constexpr NvmlEnableState k_nvml_feature_enabled = 1;

/// nvmlGpuP2PCapsIndex_t values.
enum NvmlP2PCaps : int {
  k_nvml_p2p_read = 0,
  k_nvml_p2p_write = 1,
  k_nvml_p2p_nvlink = 2,
  k_nvml_p2p_atomics = 3,
};
using NvmlP2PStatus = int;  // nvmlGpuP2PStatus_t: 0 OK, else why not
inline constexpr NvmlP2PStatus k_nvml_p2p_status_ok = 0;

/// NVML_NVLINK_MAX_LINKS.
inline constexpr unsigned k_nvml_nvlink_max_links = 18;

/// nvmlPciInfo_t as the _v2/_v3 entry points fill it.
struct NvmlPciInfo {
  char bus_id_legacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pci_device_id;
  unsigned pci_subsystem_id;
  char bus_id[32];  // "00000000:18:00.0"
};

// Buffer sizes NVML documents for its string getters.
inline constexpr unsigned k_nvml_name_size = 96;
inline constexpr unsigned k_nvml_uuid_size = 80;
inline constexpr unsigned k_nvml_driver_version_size = 80;

struct NvmlApi {
  NvmlReturn (*init)() = nullptr;                       // nvmlInit_v2
  NvmlReturn (*shutdown)() = nullptr;                   // nvmlShutdown
  const char* (*error_string)(NvmlReturn) = nullptr;    // nvmlErrorString
  NvmlReturn (*device_get_count)(unsigned*) = nullptr;  // nvmlDeviceGetCount_v2
  NvmlReturn (*device_get_handle_by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*device_get_name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*device_get_uuid)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*device_get_nvlink_state)(NvmlDevice, unsigned, NvmlEnableState*) = nullptr;
  NvmlReturn (*device_get_nvlink_remote_pci_info)(NvmlDevice, unsigned, NvmlPciInfo*) = nullptr;
  NvmlReturn (*device_get_p2p_status)(NvmlDevice, NvmlDevice, int, NvmlP2PStatus*) = nullptr;
  NvmlReturn (*system_get_driver_version)(char*, unsigned) = nullptr;

  /// "NVML error 3 (Not Supported)"-style text for a return code.
  std::string describe(NvmlReturn rc) const;
};

/// An opened library and its bound entry points (movable; the handle owns
/// the code the pointers name).
struct NvmlLibrary {
  DlLibrary library;
  NvmlApi api;
};

/// Opens the first candidate that loads and binds every entry point; a
/// missing symbol is unavailable naming it and quoting dlerror(). Not cached
/// (tests use it with fake libraries).
Result<NvmlLibrary> open_nvml(const std::vector<std::string>& candidates);

/// The process-wide NVML: candidates EPKIT_NVML_LIB, then libnvidia-ml.so.1;
/// loaded once (call_once) and cached, failure included.
Result<const NvmlApi*> load_nvml();

/// "00000000:18:00.0" or "0000:18:00.0" -> "0000:18:00.0" (sysfs spelling,
/// lower case); "" for "FFFFFFFF:FF:FF.0" (a remote NVML cannot name);
/// lower-cased but otherwise unchanged when it does not parse.
std::string normalize_bus_id(const std::string& bus_id);

}  // namespace epkit::host::dl
