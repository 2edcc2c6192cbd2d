// Small text helpers shared by the CLI (did-you-mean) and the checks
// (nearest known variable name).
#pragma once

#include <cstddef>
#include <string_view>

namespace epkit::util {

/// Levenshtein distance (insert, delete, substitute each cost 1).
std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace epkit::util
