// `epkit bench nccl <collective>`: nccl-tests' flags, table and bus-bandwidth
// factors, with a data check on every GPU and a --min-busbw pass/fail exit.
#pragma once

#include "cli/commands/bench/bench_subcommand.h"

namespace epkit::cli {

BenchSubcommand add_bench_nccl(CLI::App& bench);

}  // namespace epkit::cli
