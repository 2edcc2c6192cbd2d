// Typed wrapper over libcuda, opened with dlopen (see library.h).
#pragma once

#include <epkit/result.h>

namespace epkit::host::dl {

struct CudaApi {
  // Function pointers are added by the wrapper's implementation.
  int placeholder = 0;
};

/// Loads once (call_once) and caches; unavailable carries dlerror().
Result<const CudaApi*> load_cuda();

}  // namespace epkit::host::dl
