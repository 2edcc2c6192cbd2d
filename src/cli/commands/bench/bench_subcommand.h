// One subcommand of `epkit bench`, each in a file of its own
// (bench_<name>.cc): it adds its options to the bench command and returns
// what runs it once the command line is parsed. Option storage lives in the
// returned function.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/command.h"

namespace epkit::cli {

struct BenchSubcommand {
  CLI::App* app = nullptr;
  Runner run;
};

}  // namespace epkit::cli
