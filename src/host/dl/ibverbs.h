// Typed wrapper over libibverbs, opened with dlopen (see library.h).
#pragma once

#include <epkit/result.h>

namespace epkit::host::dl {

struct VerbsApi {
  // Function pointers are added by the wrapper's implementation.
  int placeholder = 0;
};

/// Loads once (call_once) and caches; unavailable carries dlerror().
Result<const VerbsApi*> load_ibverbs();

}  // namespace epkit::host::dl
