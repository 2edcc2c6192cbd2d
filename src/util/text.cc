#include "util/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace epkit::util {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({above + 1, row[j - 1] + 1, diagonal + cost});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::size_t utf8_sequence(std::string_view text) {
  if (text.empty()) return 0;
  auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char b0 = byte(0);
  if (b0 < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;  // the second byte's range (RFC 3629's table)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (text.size() < n) return 0;
  if (byte(1) < lo || byte(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return n;
}

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    std::size_t n = utf8_sequence(text);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      n = 1;
    } else {
      out += text.substr(0, n);
    }
    text.remove_prefix(n);
  }
  return out;
}

namespace {

// ESC [ (digits or ';')* m at the start of `text`: its length, else 0.
std::size_t sgr_length(std::string_view text) {
  if (text.size() < 3 || text[0] != '\x1b' || text[1] != '[') return 0;
  for (std::size_t i = 2; i < text.size() && i < 32; ++i) {
    char c = text[i];
    if (c == 'm') return i + 1;
    if ((c < '0' || c > '9') && c != ';') return 0;
  }
  return 0;
}

std::string escape_text(std::string_view text, bool keep_newlines, bool keep_sgr) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    auto c = static_cast<unsigned char>(text[0]);
    if (keep_sgr) {
      if (std::size_t sgr = sgr_length(text)) {
        out += text.substr(0, sgr);
        text.remove_prefix(sgr);
        continue;
      }
    }
    std::size_t n = utf8_sequence(text);
    bool control = c < 0x20;
    bool kept = c == '\t' || (keep_newlines && c == '\n');
    // U+0080..U+009F (C2 80..C2 9F): C1 controls, which some terminals obey.
    bool c1 = n == 2 && c == 0xC2 && static_cast<unsigned char>(text[1]) < 0xA0;
    if (n == 0 || (control && !kept)) {
      // Bytes JSON never holds raw (dump_json escapes C0 and replaces
      // invalid UTF-8), so \xNN cannot break a JSON document.
      out += fmt::format("\\x{:02x}", c);
      n = 1;
    } else if (c == 0x7F || c1) {
      // Valid in a JSON string, raw: written as the JSON escape of the same
      // character, so a JSON document stays valid and means the same.
      out += fmt::format("\\u{:04x}", c == 0x7F ? 0x7Fu : static_cast<unsigned char>(text[1]));
    } else {
      out += text.substr(0, n);
    }
    text.remove_prefix(n);
  }
  return out;
}

}  // namespace

std::string terminal_safe(std::string_view text, bool keep_sgr) {
  return escape_text(text, true, keep_sgr);
}

std::string one_line(std::string_view text) {
  return escape_text(text, false, false);
}

}  // namespace epkit::util
