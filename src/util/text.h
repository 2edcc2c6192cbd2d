// Small text helpers shared by the CLI (did-you-mean, what reaches the
// terminal) and the checks (nearest known variable name).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace epkit::util {

/// Levenshtein distance (insert, delete, substitute each cost 1).
std::size_t edit_distance(std::string_view a, std::string_view b);

/// Length of the valid UTF-8 sequence at the start of `text` (1 to 4), or 0
/// when it starts with an invalid, overlong, surrogate or cut-off one.
std::size_t utf8_sequence(std::string_view text);

/// `text` with every invalid UTF-8 byte replaced by U+FFFD: sysfs strings,
/// DMI fields and environment values may hold any bytes, and JSON, YAML and
/// Prometheus text must be UTF-8.
std::string valid_utf8(std::string_view text);

/// `text` safe to show on a terminal: control bytes other than '\n' and
/// '\t' (ESC, NUL, '\r') and invalid UTF-8 bytes written as \xNN; DEL and
/// the C1 controls (U+0080..U+009F) as \u007f, \u0080.. (their JSON escapes:
/// a JSON document through this stays valid and equal). With keep_sgr, colour
/// sequences (ESC [ digits;... m) stay: the CLI's own styling, harmless when a
/// value carries one.
std::string terminal_safe(std::string_view text, bool keep_sgr = false);

/// `text` as one line of a comment (sh, YAML): every control character but
/// '\t', newlines included, and invalid UTF-8 written as \xNN, so that a
/// value read from the node cannot end the comment and start a command.
std::string one_line(std::string_view text);

}  // namespace epkit::util
