// Libraries::real(): the dlopen loaders of the live node.
#include "host/dl/cuda.h"
#include "host/dl/ibverbs.h"
#include "host/dl/nvml.h"
#include "host/host.h"

namespace epkit::host {

Libraries Libraries::real() {
  Libraries libs;
  libs.nvml = &dl::load_nvml;
  libs.cuda = &dl::load_cuda;
  libs.ibverbs = &dl::load_ibverbs;
  return libs;
}

}  // namespace epkit::host
