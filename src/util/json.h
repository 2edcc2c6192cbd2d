// The one way epkit turns JSON into text: every --json, --format json and
// store message goes through dump_json, so that a value holding invalid
// UTF-8 (a sysfs string, a DMI field, an environment value) comes out with
// U+FFFD in its place instead of nlohmann's type_error 316 aborting the run.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace epkit::util {

/// j.dump(indent) with invalid UTF-8 replaced by U+FFFD.
std::string dump_json(const nlohmann::json& j, int indent = -1);
std::string dump_json(const nlohmann::ordered_json& j, int indent = -1);

}  // namespace epkit::util
