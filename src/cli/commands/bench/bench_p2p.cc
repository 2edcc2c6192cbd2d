#include "cli/commands/bench/bench_p2p.h"

#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "bench/p2p.h"
#include "bench/sweep.h"
#include "cli/gpu_launch.h"
#include "host/dl/nccl.h"
#include "util/json.h"

namespace epkit::cli {
namespace {

int run_p2p_command(Io& io, const std::string& size, int iters, bool json) {
  auto bytes = bench::parse_size(size);
  if (!bytes) return refuse_run(io, "bench p2p", json, k_exit_usage, bytes.error().message);
  if (*bytes < 16) {
    return refuse_run(io, "bench p2p", json, k_exit_usage, "-b must be at least 16 bytes");
  }
#ifdef EPKIT_WITH_CUDA
  bench::P2pOptions po;
  po.bytes = *bytes / 16 * 16;
  po.iters = iters;
  auto matrices = bench::run_p2p(po);
  if (!matrices) {
    return refuse_run(
        io, "bench p2p", json,
        matrices.error().code == ErrorCode::unavailable ? k_gpu_unavailable : k_gpu_nccl_error,
        matrices.error().message);
  }
  if (json) {
    nlohmann::json j = {{"bytes", po.bytes}, {"iters", po.iters}};
    nlohmann::json ms = nlohmann::json::array();
    for (const auto& m : *matrices)
      ms.push_back({{"mode", bench::to_string(m.mode)}, {"gbps", m.gbps}});
    j["matrices"] = ms;
    io.out << util::dump_json(j, 2) << "\n";
  } else {
    io.out << fmt::format("epkit bench p2p: {} bytes per copy, {} iterations\n\n", po.bytes,
                          po.iters);
    for (const auto& m : *matrices) io.out << bench::render_p2p(m) << "\n";
  }
  return k_gpu_ok;
#else
  (void)iters;
  return refuse_run(io, "bench p2p", json, k_gpu_unavailable, host::dl::nccl_not_built().message);
#endif
}

}  // namespace

BenchSubcommand add_bench_p2p(CLI::App& bench) {
  CLI::App* p2p = bench.add_subcommand(
      "p2p", "GPU x GPU copy bandwidth matrix: copy engine and SM kernel, uni/bidirectional");
  auto size = std::make_shared<std::string>("256M");
  auto iters = std::make_shared<int>(10);
  auto json = std::make_shared<bool>(false);
  p2p->add_option("-b,--bytes", *size, "Bytes per copy (default 256M)");
  p2p->add_option("-n,--iters", *iters, "Timed copies per pair (default 10)")
      ->check(CLI::Range(1, 100000));
  p2p->add_flag("--json", *json, "Write the matrices as JSON");
  return {p2p, [size, iters, json](Io& io) { return run_p2p_command(io, *size, *iters, *json); }};
}

}  // namespace epkit::cli
