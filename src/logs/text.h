// Small string helpers for log text: byte search, numbers, and the one place
// where raw log bytes become printable (valid UTF-8, bounded length).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace epkit::logs {

/// Position of `needle` in `hay`, or npos. glibc's memmem is far faster than
/// string_view::find for the short needles the parser uses.
std::size_t find_bytes(std::string_view hay, std::string_view needle);
inline bool contains(std::string_view hay, std::string_view needle) {
  return find_bytes(hay, needle) != std::string_view::npos;
}

/// The unsigned decimal number at the start of `s` (at most 18 digits).
std::optional<std::uint64_t> parse_uint(std::string_view s);
/// The integer that follows the first occurrence of `key` in `s`.
std::optional<std::int64_t> number_after(std::string_view s, std::string_view key);
/// The whitespace-free word that follows the first occurrence of `key`.
std::string_view word_after(std::string_view s, std::string_view key);

std::string_view trim(std::string_view s);

/// The source path an NVSHMEM error line starts with:
/// "/build/nvshmem/src/host/init/init.cu:1020: non-zero status: 7 ..." or
/// ".../init.cu:nvshmemi_common_init:1020: ..." -> the path before the line
/// number, or "" when the line does not start that way.
std::string_view source_path_of(std::string_view m);

/// The items with `sep` between them.
std::string join(const std::vector<std::string>& items, std::string_view sep);

/// Log bytes made fit to print and to put in JSON: invalid UTF-8 sequences
/// and control characters become U+FFFD, and text beyond `max_bytes` is cut
/// (on a character boundary) with a trailing " [...]".
/// Bytes of `s` that are not text: NUL bytes and bytes of invalid UTF-8.
struct NonText {
  std::size_t nul = 0;
  std::size_t invalid = 0;
};
NonText count_non_text(std::string_view s);

std::string printable(std::string_view raw, std::size_t max_bytes = 240);

}  // namespace epkit::logs
