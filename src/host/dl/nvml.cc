#include "host/dl/nvml.h"

namespace epkit::host::dl {

Result<const NvmlApi*> load_nvml() {
  return make_error(ErrorCode::unavailable, "nvml wrapper not built yet");
}

}  // namespace epkit::host::dl
