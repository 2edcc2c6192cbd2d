#include "env/shell.h"

namespace epkit::env {

std::string shell_word(const std::string& value) {
  bool plain = !value.empty() && value.find_first_not_of(
                                     "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                     "0123456789_./:,=+-@%^") == std::string::npos;
  // A leading '=' (NCCL's exact-match lists) reads as an assignment to shellcheck.
  if (plain && value.front() != '=') return value;
  std::string out = "'";
  for (char c : value) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace epkit::env
