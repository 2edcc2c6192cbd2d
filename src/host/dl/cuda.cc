#include "host/dl/cuda.h"

namespace epkit::host::dl {

Result<const CudaApi*> load_cuda() {
  return make_error(ErrorCode::unavailable, "cuda wrapper not built yet");
}

}  // namespace epkit::host::dl
