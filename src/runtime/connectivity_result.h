// Rank 0 of `epkit test` reads every rank's connectivity result from the
// store: another process's JSON, so it is checked field by field
// (runtime/peer_json.h) before rank 0 prints or counts it. Kept apart from
// the GPU code (connectivity.h) so that the check is tested without a GPU.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

namespace epkit::runtime {

/// The result rank `rank` published, with only the known fields, each of its
/// type (strings without control characters). A document that is not such
/// an object, or names another rank, becomes a failed result whose reason
/// says so: rank 0 reports it instead of throwing or printing raw bytes.
nlohmann::json checked_connectivity_result(std::string_view text, int rank);

}  // namespace epkit::runtime
