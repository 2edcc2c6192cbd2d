// main only forwards to run_cli, so the CLI is testable as a function.
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <iostream>

#include "cli/command.h"
#include "host/env.h"

namespace {

// An exception that escapes a thread, or a throw during unwinding, ends in
// std::terminate: say so and exit with a defined code, never abort's 134.
[[noreturn]] void on_terminate() {
  static const char message[] = "epkit: internal error: uncaught exception\n";
  [[maybe_unused]] auto n = ::write(STDERR_FILENO, message, sizeof message - 1);
  ::_exit(epkit::cli::k_exit_internal);
}

}  // namespace

int main(int argc, char** argv) {
  std::set_terminate(on_terminate);
  epkit::cli::Io io{std::cout, std::cerr, false};
  io.color = isatty(STDOUT_FILENO) != 0 && !epkit::host::Env::from_process().has("NO_COLOR");
  return epkit::cli::run_cli(argc, argv, io);
}
