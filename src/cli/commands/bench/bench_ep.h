// `epkit bench ep`: DeepEP's test_intranode.py tuning run for the EP engine
// (test_internode.py's RDMA and NVL figures when the launch spans nodes), or
// test_low_latency.py's with --mode low-latency.
#pragma once

#include "cli/commands/bench/bench_subcommand.h"

namespace epkit::cli {

BenchSubcommand add_bench_ep(CLI::App& bench);

}  // namespace epkit::cli
