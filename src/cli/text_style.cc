#include "cli/text_style.h"

namespace epkit::cli {

std::string styled(bool color, Style style, const std::string& text) {
  if (!color || style == Style::plain) return text;
  const char* code = "";
  switch (style) {
    case Style::plain:
      break;
    case Style::bold:
      code = "1";
      break;
    case Style::dim:
      code = "2";
      break;
    case Style::red:
      code = "1;31";
      break;
    case Style::green:
      code = "32";
      break;
    case Style::yellow:
      code = "1;33";
      break;
    case Style::magenta:
      code = "35";
      break;
    case Style::cyan:
      code = "36";
      break;
  }
  return "\x1b[" + std::string(code) + "m" + text + "\x1b[0m";
}

}  // namespace epkit::cli
