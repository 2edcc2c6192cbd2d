// Runs the CLI in-process (run_cli) and captures what it prints.
#pragma once

#include <string>
#include <vector>

namespace epkit::test {

struct CliRun {
  int code = -1;
  std::string out;
  std::string err;
};

/// `args` without the program name: {"doctor", "--json"}.
CliRun run_epkit(std::vector<std::string> args);

/// Runs a shell command (a real binary, when in-process is not the point:
/// GPU commands would start ranks); stderr joins `out`, `err` stays empty.
CliRun run_shell(const std::string& command);

}  // namespace epkit::test
