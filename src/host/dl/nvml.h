// Typed wrapper over libnvml, opened with dlopen (see library.h).
#pragma once

#include <epkit/result.h>

namespace epkit::host::dl {

struct NvmlApi {
  // Function pointers are added by the wrapper's implementation.
  int placeholder = 0;
};

/// Loads once (call_once) and caches; unavailable carries dlerror().
Result<const NvmlApi*> load_nvml();

}  // namespace epkit::host::dl
