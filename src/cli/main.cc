// main only forwards to run_cli, so the CLI is testable as a function.
#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "cli/command.h"

int main(int argc, char** argv) {
  epkit::cli::Io io{std::cout, std::cerr, false};
  io.color = isatty(STDOUT_FILENO) != 0 && std::getenv("NO_COLOR") == nullptr;
  return epkit::cli::run_cli(argc, argv, io);
}
