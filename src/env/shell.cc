#include "env/shell.h"

namespace epkit::env {

bool shell_plain(const std::string& value) {
  return !value.empty() && value.find_first_not_of(
                               "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                               "0123456789_./:,=+-@%^") == std::string::npos;
}

std::string shell_word(const std::string& value) {
  // A leading '=' (NCCL's exact-match lists) reads as an assignment to shellcheck.
  if (shell_plain(value) && value.front() != '=') return value;
  std::string out = "'";
  for (char c : value) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace epkit::env
