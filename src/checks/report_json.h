// The doctor report as JSON (schema: docs/doctor-json.md).
#pragma once

#include <nlohmann/json.hpp>

#include "checks/registry.h"

namespace epkit::checks {

nlohmann::json to_json(const Report& report, const Context& ctx);

}  // namespace epkit::checks
