// Snapshot <-> JSON. `epkit topo --json` writes it; from_json reads it back
// (round trip: from_json(to_json(s)) == s field by field), so a node's
// snapshot can be kept as a fixture or compared across nodes.
#pragma once

#include <epkit/result.h>

#include <nlohmann/json.hpp>

#include "topo/model.h"
#include "topo/snapshot.h"

namespace epkit::topo {

nlohmann::json to_json(const Snapshot& snap);
/// Missing keys take their defaults; a key of the wrong type is an invalid
/// error naming it.
Result<Snapshot> from_json(const nlohmann::json& j);

nlohmann::json to_json(const Matrix& matrix);
nlohmann::json to_json(const std::vector<NicChoice>& choices);

}  // namespace epkit::topo
