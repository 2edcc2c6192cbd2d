#include "cli/commands/bench/bench_p2p.h"

#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/p2p.h"
#include "bench/sweep.h"
#include "cli/gpu_launch.h"
#include "host/dl/nccl.h"
#include "util/json.h"

namespace epkit::cli {
namespace {

// nccl-tests' size flags: -b the smallest size, -e the largest (default -b,
// so `-b 64M` alone is one size, as it was when -b meant "bytes per copy"),
// -f the step; -w and -n the warm-up and timed copies per pair.
struct P2pCliOptions {
  std::string min_bytes = "256M";
  std::optional<std::string> max_bytes;
  std::size_t factor = 2;
  int warmup = 2;
  int iters = 10;
  bool json = false;
};

// Copies move 16-byte words: every size is rounded down to a multiple of 16.
constexpr std::size_t k_p2p_word = 16;

Result<std::vector<std::size_t>> p2p_sizes(const P2pCliOptions& o) {
  auto lo = bench::parse_size(o.min_bytes);
  if (!lo) return lo.error();
  if (*lo < k_p2p_word) return make_error(ErrorCode::invalid, "-b must be at least 16 bytes");
  auto hi = o.max_bytes ? bench::parse_size(*o.max_bytes) : lo;
  if (!hi) return hi.error();
  return bench::size_sweep(*lo, *hi, o.factor, k_p2p_word, 1);
}

int run_p2p_command(Io& io, const P2pCliOptions& o) {
  auto sizes = p2p_sizes(o);
  if (!sizes) return refuse_run(io, "bench p2p", o.json, k_exit_usage, sizes.error().message);
#ifdef EPKIT_WITH_CUDA
  nlohmann::json per_size = nlohmann::json::array();
  for (std::size_t bytes : *sizes) {
    bench::P2pOptions po;
    po.bytes = bytes;
    po.iters = o.iters;
    po.warmup = o.warmup;
    auto matrices = bench::run_p2p(po);
    if (!matrices) {
      return refuse_run(io, "bench p2p", o.json,
                        matrices.error().code == ErrorCode::unavailable ? runtime::k_gpu_unavailable
                                                                        : runtime::k_gpu_nccl_error,
                        matrices.error().message);
    }
    if (o.json) {
      nlohmann::json ms = nlohmann::json::array();
      for (const auto& m : *matrices) {
        ms.push_back({{"mode", bench::to_string(m.mode)}, {"gbps", m.gbps}});
      }
      per_size.push_back({{"bytes", bytes}, {"matrices", ms}});
    } else {
      io.out << fmt::format("epkit bench p2p: {} bytes per copy, {} iterations ({} warm-up)\n\n",
                            bytes, o.iters, o.warmup);
      for (const auto& m : *matrices) io.out << bench::render_p2p(m) << "\n";
    }
  }
  if (o.json) {
    // "bytes" and "matrices" at the top are the largest size's, the shape
    // of the single-size output scripts were written against; "sizes" has
    // every size of the sweep.
    nlohmann::json j = {{"iters", o.iters},
                        {"warmup", o.warmup},
                        {"bytes", per_size.back()["bytes"]},
                        {"matrices", per_size.back()["matrices"]},
                        {"sizes", per_size}};
    io.out << util::dump_json(j, 2) << "\n";
  }
  return runtime::k_gpu_ok;
#else
  return refuse_run(io, "bench p2p", o.json, runtime::k_gpu_unavailable,
                    host::dl::nccl_not_built().message);
#endif
}

}  // namespace

BenchSubcommand add_bench_p2p(CLI::App& bench) {
  CLI::App* p2p = bench.add_subcommand(
      "p2p", "GPU x GPU copy bandwidth matrix: copy engine and SM kernel, uni/bidirectional");
  auto o = std::make_shared<P2pCliOptions>();
  // --bytes: the old spelling of -b, kept for scripts.
  p2p->add_option("-b,--minbytes,--bytes", o->min_bytes, "Smallest bytes per copy (default 256M)");
  p2p->add_option("-e,--maxbytes", o->max_bytes, "Largest bytes per copy (default: -b's)");
  p2p->add_option("-f,--stepfactor", o->factor, "Size multiplier (default 2)");
  p2p->add_option("-n,--iters", o->iters, "Timed copies per pair (default 10)")
      ->check(CLI::Range(1, 100000));
  p2p->add_option("-w,--warmup_iters,--warmup", o->warmup,
                  "Untimed copies per pair before the timed ones (default 2)")
      ->check(CLI::Range(0, 100000));
  p2p->add_flag("--json", o->json, "Write the matrices as JSON");
  return {p2p, [o](Io& io) { return run_p2p_command(io, *o); }};
}

}  // namespace epkit::cli
