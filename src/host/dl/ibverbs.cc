#include "host/dl/ibverbs.h"

namespace epkit::host::dl {

Result<const VerbsApi*> load_ibverbs() {
  return make_error(ErrorCode::unavailable, "ibverbs wrapper not built yet");
}

}  // namespace epkit::host::dl
