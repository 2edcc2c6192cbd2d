// `epkit bench p2p`: the GPU x GPU copy bandwidth matrices of one process
// over every visible GPU (bench/p2p.h does the copies).
#pragma once

#include "cli/commands/bench/bench_subcommand.h"

namespace epkit::cli {

BenchSubcommand add_bench_p2p(CLI::App& bench);

}  // namespace epkit::cli
