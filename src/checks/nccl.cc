#include "checks/check.h"

namespace epkit::checks {

std::span<const Check> nccl_checks() { return {}; }

}  // namespace epkit::checks
