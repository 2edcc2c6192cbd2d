#include "ep/network_leg/leg.h"

namespace epkit::ep::network_leg {

const char* to_string(BackendKind kind) {
  switch (kind) {
    case BackendKind::emulated_nic:
      return "emulated NIC";
    case BackendKind::nccl_proxy:
      return "NCCL proxy";
    case BackendKind::nccl_gin:
      return "NCCL GIN";
  }
  return "unknown";
}

}  // namespace epkit::ep::network_leg
