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

}  // namespace epkit::test
