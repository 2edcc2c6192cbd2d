// The `epkit logs --json` document (schema "epkit.logs/1", docs/logs.md).
#pragma once

#include <nlohmann/json.hpp>

#include "logs/analyzer.h"

namespace epkit::logs {

nlohmann::json to_json(const Report& report);

/// Sorts counts by name: the order lines arrived in is not meaningful.
std::vector<Count> sorted_counts(const std::vector<Count>& counts);

}  // namespace epkit::logs
