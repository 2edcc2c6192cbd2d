#include "support/cli_run.h"

#include <sstream>

#include "cli/command.h"

namespace epkit::test {

CliRun run_epkit(std::vector<std::string> args) {
  args.insert(args.begin(), "epkit");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out;
  std::ostringstream err;
  cli::Io io{out, err, false};
  CliRun result;
  result.code = cli::run_cli(static_cast<int>(argv.size()), argv.data(), io);
  result.out = out.str();
  result.err = err.str();
  return result;
}

}  // namespace epkit::test
