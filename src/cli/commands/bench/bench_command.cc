// epkit bench: the GPU benchmarks, one subcommand per file (bench_nccl.cc,
// bench_p2p.cc, bench_ep.cc). Every subcommand that takes sizes or
// iterations spells them as nccl-tests does: -b/-e/-f, -w, -n.
#include <array>

#include "cli/command.h"
#include "cli/commands/bench/bench_ep.h"
#include "cli/commands/bench/bench_nccl.h"
#include "cli/commands/bench/bench_p2p.h"

namespace epkit::cli {

Command make_bench_command() {
  return {"bench", "GPU benchmarks: NCCL collectives (nccl-tests' table)",
          [](CLI::App& app) -> Runner {
            app.require_subcommand(1);
            std::array<BenchSubcommand, 3> subs = {add_bench_nccl(app), add_bench_p2p(app),
                                                   add_bench_ep(app)};
            return [subs](Io& io) -> int {
              for (const auto& s : subs) {
                if (s.app->parsed()) return s.run(io);
              }
              return k_exit_usage;  // require_subcommand(1) makes this unreachable
            };
          }};
}

}  // namespace epkit::cli
