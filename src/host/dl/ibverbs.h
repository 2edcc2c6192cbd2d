// Typed wrapper over libibverbs, opened with dlopen (see library.h).
//
// The doctor only enumerates devices: listing them makes libibverbs load its
// providers, so a count of zero while sysfs shows devices is the provider ABI
// failure seen on nodes (providers printing "couldn't load driver" on stderr
// is libibverbs' own output). Symbols are bound at version IBVERBS_1.1, the
// version NCCL asks for, so an unversioned impostor is refused.
#pragma once

#include <epkit/result.h>

#include <string>
#include <vector>

#include "host/dl/library.h"

struct ibv_device;

namespace epkit::host::dl {

struct VerbsApi {
  ibv_device** (*get_device_list)(int* num_devices) = nullptr;
  void (*free_device_list)(ibv_device** list) = nullptr;
  const char* (*get_device_name)(ibv_device* device) = nullptr;

  std::string path;  // the file the loader picked (dlinfo)
  int device_count = 0;
  std::vector<std::string> device_names;
};

/// Candidates: EPKIT_IBVERBS_LIB alone when set (a wrong override must be
/// reported, not hidden by a fallback), else libibverbs.so.1, libibverbs.so.
std::vector<std::string> ibverbs_candidates();

/// Opens the first loadable candidate into `holder`, binds the symbols and
/// lists the devices. unavailable errors carry dlerror().
Result<VerbsApi> open_ibverbs(const std::vector<std::string>& candidates, DlLibrary& holder);

/// Loads once (call_once) and caches; unavailable carries dlerror().
Result<const VerbsApi*> load_ibverbs();

}  // namespace epkit::host::dl
