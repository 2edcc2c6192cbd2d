#include "support/cli_run.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
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

CliRun run_shell(const std::string& command) {
  CliRun r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe) != nullptr) r.out += buf.data();
  int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace epkit::test
