// Reading JSON that another process sent (a peer rank through the store, a
// node's placement): nothing here throws, whatever the document holds.
//
// nlohmann's at(), get<T>() and value() throw on a missing key or another
// type; on a peer's data that would be a crash a stranger or a broken node
// can cause. These accessors check presence, type and range first and say
// "absent" instead. A parse of invalid UTF-8 fails (nlohmann rejects it), so
// every string that comes back is valid UTF-8; control characters are
// refused here so that a peer's text can be printed as it is.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace epkit::runtime::peer {

using Json = nlohmann::json;

/// The document, or a discarded value (is_discarded()) for anything that is
/// not JSON, more than `max_bytes` long or nested deeper than 32 levels.
Json parse(std::string_view text, std::size_t max_bytes = 1 << 20);

/// j[key] when j is an object holding a string of at most max_len bytes
/// with no control characters (C0, DEL, C1).
std::optional<std::string> string_field(const Json& j, std::string_view key,
                                        std::size_t max_len = 4096);
/// The same check on a value itself.
std::optional<std::string> string_value(const Json& v, std::size_t max_len = 4096);
/// j[key] when it is an integer within lo..hi.
std::optional<std::int64_t> int_field(const Json& j, std::string_view key,
                                      std::int64_t lo = std::numeric_limits<std::int64_t>::min(),
                                      std::int64_t hi = std::numeric_limits<std::int64_t>::max());
/// j[key] when it is a finite number.
std::optional<double> number_field(const Json& j, std::string_view key);
/// The same check on a value itself.
std::optional<double> number_value(const Json& v);
std::optional<bool> bool_field(const Json& j, std::string_view key);
/// j[key] when present (any type); nullptr otherwise.
const Json* field(const Json& j, std::string_view key);

}  // namespace epkit::runtime::peer
