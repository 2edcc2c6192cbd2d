// libFuzzer target for the env-file readers (--env-file: KEY=VALUE lines and
// k8s env: lists) and the text helpers that guard epkit's output. Any bytes
// must neither crash nor hang, and:
//  - every name read is a shell name;
//  - what `export NAME=<shell_word(value)>` lines hold reads back the same
//    (the quoting every sh output uses agrees with the parser);
//  - one_line() leaves no control byte but '\t', terminal_safe() none but
//    '\n' and '\t', valid_utf8() and both of those only valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "env/job_env.h"
#include "env/shell.h"
#include "host/env.h"
#include "util/text.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

bool shell_name(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

bool all_utf8(std::string_view s) {
  while (!s.empty()) {
    std::size_t n = epkit::util::utf8_sequence(s);
    if (n == 0) return false;
    s.remove_prefix(n);
  }
  return true;
}

void check_round_trip(const epkit::host::Env& env) {
  std::string text;
  for (const auto& [name, value] : env.all()) {
    if (value.find('\0') != std::string::npos) return;  // never in a parsed value
    text += "export " + name + "=" + epkit::env::shell_word(value) + "\n";
  }
  auto again = epkit::host::Env::parse(text, "round-trip");
  check(again.ok());
  check(again->all() == env.all());
}

void check_text_helpers(std::string_view s) {
  std::string line = epkit::util::one_line(s);
  for (unsigned char c : line) check((c >= 0x20 && c != 0x7F) || c == '\t');
  check(all_utf8(line));
  std::string shown = epkit::util::terminal_safe(s);
  for (unsigned char c : shown) check((c >= 0x20 && c != 0x7F) || c == '\n' || c == '\t');
  check(all_utf8(shown));
  check(all_utf8(epkit::util::valid_utf8(s)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto env = epkit::host::Env::parse(text, "fuzz.env");
  if (env) {
    for (const auto& [name, value] : env->all()) check(shell_name(name));
    check_round_trip(*env);
  }
  if (epkit::env::looks_like_k8s_env(text)) (void)epkit::env::parse_k8s_env(text, "fuzz.yaml");
  // Every value shell_word quotes reads back as itself.
  if (text.find('\0') == std::string_view::npos) {
    auto one =
        epkit::host::Env::parse("A=" + epkit::env::shell_word(std::string(text)) + "\n", "w");
    check(one.ok());
    check(one->get("A") == std::string(text));
  }
  check_text_helpers(text);
  return 0;
}
