#include "logs/text.h"

#include <string.h>

namespace epkit::logs {

std::size_t find_bytes(std::string_view hay, std::string_view needle) {
  if (needle.empty()) return 0;
  const void* hit = memmem(hay.data(), hay.size(), needle.data(), needle.size());
  if (hit == nullptr) return std::string_view::npos;
  return static_cast<std::size_t>(static_cast<const char*>(hit) - hay.data());
}

std::optional<std::uint64_t> parse_uint(std::string_view s) {
  std::uint64_t value = 0;
  std::size_t i = 0;
  for (; i < s.size() && i < 18 && s[i] >= '0' && s[i] <= '9'; ++i) {
    value = value * 10 + static_cast<std::uint64_t>(s[i] - '0');
  }
  if (i == 0) return std::nullopt;
  return value;
}

std::optional<std::int64_t> number_after(std::string_view s, std::string_view key) {
  std::size_t at = find_bytes(s, key);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = s.substr(at + key.size());
  bool negative = !rest.empty() && rest[0] == '-';
  if (negative) rest.remove_prefix(1);
  auto value = parse_uint(rest);
  if (!value) return std::nullopt;
  auto v = static_cast<std::int64_t>(*value);
  return negative ? -v : v;
}

std::string_view word_after(std::string_view s, std::string_view key) {
  std::size_t at = find_bytes(s, key);
  if (at == std::string_view::npos) return {};
  std::string_view rest = s.substr(at + key.size());
  std::size_t end = rest.find_first_of(" \t,;");
  return rest.substr(0, end);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when invalid.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  std::size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < len; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return len;
}

}  // namespace

NonText count_non_text(std::string_view s) {
  NonText out;
  for (std::size_t i = 0; i < s.size();) {
    if (s[i] == '\0') ++out.nul;
    std::size_t len = utf8_length(s, i);
    if (len == 0) {
      ++out.invalid;
      len = 1;
    }
    i += len;
  }
  return out;
}

std::string printable(std::string_view raw, std::size_t max_bytes) {
  static constexpr std::string_view k_replacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(raw.size() < max_bytes ? raw.size() : max_bytes);
  for (std::size_t i = 0; i < raw.size();) {
    std::size_t len = utf8_length(raw, i);
    std::string_view piece = len == 0 ? k_replacement : raw.substr(i, len);
    if (len == 1 && (static_cast<unsigned char>(raw[i]) < 0x20 || raw[i] == 0x7F)) {
      piece = raw[i] == '\t' ? std::string_view(" ") : k_replacement;
    }
    if (out.size() + piece.size() > max_bytes) {
      out += " [...]";
      break;
    }
    out += piece;
    i += len == 0 ? 1 : len;
  }
  return out;
}

std::string_view source_path_of(std::string_view m) {
  std::string_view head = m.substr(0, 256);
  for (std::string_view ext : {".cpp:", ".cu:", ".h:", ".cuh:", ".c:", ".hpp:"}) {
    std::size_t at = find_bytes(head, ext);
    if (at == std::string_view::npos) continue;
    std::string_view path = head.substr(0, at + ext.size() - 1);
    if (path.find(' ') != std::string_view::npos) continue;
    return path;
  }
  return {};
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

}  // namespace epkit::logs
