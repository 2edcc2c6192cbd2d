// ANSI styling for terminal output; plain text when colour is off.
#pragma once

#include <string>

namespace epkit::cli {

enum class Style { plain, bold, dim, red, green, yellow, magenta, cyan };

std::string styled(bool color, Style style, const std::string& text);

}  // namespace epkit::cli
