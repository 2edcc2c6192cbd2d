#include "runtime/peer_json.h"

#include <cmath>

namespace epkit::runtime::peer {
namespace {

// Deep nesting costs the recursive parser stack; no message of ours nests
// more than a few levels.
bool too_deep(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

bool clean(std::string_view s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return false;
    // C1 controls (U+0080..U+009F) are 0xC2 0x80..0x9F in UTF-8; some
    // terminals obey them as escapes.
    if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9f) {
      return false;
    }
  }
  return true;
}

}  // namespace

Json parse(std::string_view text, std::size_t max_bytes) {
  if (text.size() > max_bytes || too_deep(text, 32)) return Json(Json::value_t::discarded);
  return Json::parse(text, nullptr, false);
}

const Json* field(const Json& j, std::string_view key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(std::string(key));
  return it == j.end() ? nullptr : &*it;
}

std::optional<std::string> string_value(const Json& v, std::size_t max_len) {
  if (!v.is_string()) return std::nullopt;
  const auto& s = v.get_ref<const std::string&>();
  if (s.size() > max_len || !clean(s)) return std::nullopt;
  return s;
}

std::optional<std::string> string_field(const Json& j, std::string_view key, std::size_t max_len) {
  const Json* v = field(j, key);
  return v ? string_value(*v, max_len) : std::nullopt;
}

std::optional<std::int64_t> int_field(const Json& j, std::string_view key, std::int64_t lo,
                                      std::int64_t hi) {
  const Json* v = field(j, key);
  if (v == nullptr) return std::nullopt;
  std::int64_t value = 0;
  if (v->is_number_unsigned()) {
    auto u = v->get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return std::nullopt;
    }
    value = static_cast<std::int64_t>(u);
  } else if (v->is_number_integer()) {
    value = v->get<std::int64_t>();
  } else {
    return std::nullopt;
  }
  if (value < lo || value > hi) return std::nullopt;
  return value;
}

std::optional<double> number_value(const Json& v) {
  if (!v.is_number()) return std::nullopt;
  double d = v.get<double>();
  if (!std::isfinite(d)) return std::nullopt;
  return d;
}

std::optional<double> number_field(const Json& j, std::string_view key) {
  const Json* v = field(j, key);
  return v ? number_value(*v) : std::nullopt;
}

std::optional<bool> bool_field(const Json& j, std::string_view key) {
  const Json* v = field(j, key);
  if (v == nullptr || !v->is_boolean()) return std::nullopt;
  return v->get<bool>();
}

}  // namespace epkit::runtime::peer
