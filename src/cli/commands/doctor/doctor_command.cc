// epkit doctor: run the passive checks and report, Nagios-style exit code.
#include <fmt/format.h>

#include <algorithm>
#include <ostream>

#include "checks/registry.h"
#include "checks/report_json.h"
#include "checks/report_prometheus.h"
#include "cli/command.h"
#include "cli/text_style.h"
#include "topo/probe.h"
#include "util/json.h"

namespace epkit::cli {
namespace {

struct DoctorOptions {
  CommonOptions common;
  std::vector<std::string> only;
  std::string format;  // "" when not given: text
  bool list = false;
  bool verbose = false;
};

Style status_style(checks::Status s) {
  switch (s) {
    case checks::Status::pass:
      return Style::green;
    case checks::Status::warn:
      return Style::yellow;
    case checks::Status::fail:
      return Style::red;
    case checks::Status::unknown:
      return Style::magenta;
    case checks::Status::skip:
      return Style::dim;
  }
  return Style::plain;
}

void print_list(Io& io) {
  for (const auto& check : checks::registry()) {
    io.out << fmt::format("{:<22} {}\n", check.id, check.title);
  }
}

void print_text(const checks::Report& report, const checks::Context& ctx, bool verbose, Io& io) {
  const auto& topo = ctx.topo;
  io.out << fmt::format("epkit doctor: {} GPU{}, {} RDMA device{}", topo.gpus.size(),
                        topo.gpus.size() == 1 ? "" : "s", topo.nics.size(),
                        topo.nics.size() == 1 ? "" : "s");
  if (!ctx.host.live()) io.out << fmt::format(" (sysroot {})", ctx.host.fs().root());
  io.out << fmt::format("; environment: {}\n", ctx.host.env().origin());
  if (topo.gpus.empty() && topo.nics.empty()) {
    io.out << "No NVIDIA GPU and no RDMA device on this node: their checks are skipped.\n"
              "To see a GPU node, run an example from the source tree: "
              "epkit doctor --sysroot examples/gke-a4\n";
  }

  std::string_view group;
  for (const auto& run : report.runs) {
    auto g = checks::group_of(run.check->id);
    if (g != group) {
      group = g;
      io.out << "\n" << styled(io.color, Style::bold, std::string(group)) << "\n";
    }
    const auto& o = run.outcome;
    io.out << fmt::format(
        "  {} {:<20} {}\n",
        styled(io.color, status_style(o.status), fmt::format("{:<7}", checks::to_string(o.status))),
        run.check->id, o.summary);
    bool detail = verbose || (o.status != checks::Status::pass && o.status != checks::Status::skip);
    if (!detail) continue;
    const std::string pad(32, ' ');
    // Eight rows show the point on a terminal; --verbose and --json keep all.
    constexpr std::size_t k_evidence_rows = 8;
    std::size_t shown = verbose ? o.evidence.size() : std::min(o.evidence.size(), k_evidence_rows);
    for (std::size_t i = 0; i < shown; ++i) {
      const auto& e = o.evidence[i];
      io.out << fmt::format("{:>31} {} = {}", i == 0 ? "evidence" : "", e.key, e.value);
      if (!e.source.empty())
        io.out << styled(io.color, Style::dim, fmt::format("  ({})", e.source));
      io.out << "\n";
    }
    if (shown < o.evidence.size()) {
      io.out << fmt::format("{:>31} ... {} more (--verbose or --json)\n", "",
                            o.evidence.size() - shown);
    }
    if (!o.expected.empty()) io.out << fmt::format("{:>31} {}\n", "expected", o.expected);
    if (!o.fix.empty()) io.out << fmt::format("{:>31} {}\n", "fix", o.fix);
  }

  int counts[5] = {};
  for (const auto& run : report.runs) ++counts[static_cast<int>(run.outcome.status)];
  int code = checks::exit_code(report);
  io.out << fmt::format(
      "\nsummary: {} pass, {} warn, {} fail, {} skip, {} unknown in {:.0f} ms; exit {} ({})\n",
      counts[0], counts[1], counts[2], counts[3], counts[4], report.millis, code,
      code == 0 ? "OK" : checks::to_string(report.worst));
}

}  // namespace

Command make_doctor_command() {
  return {"doctor", "Check this node's GPU, RDMA, NCCL and NVSHMEM setup (passive, about a second)",
          [](CLI::App& app) -> Runner {
            auto opts = std::make_shared<DoctorOptions>();
            add_json_flag(app, opts->common);
            add_sysroot_option(app, opts->common);
            add_env_file_option(app, opts->common);
            app.add_option("--only", opts->only, "Run only these check ids")->type_name("ID...");
            app.add_option("--format", opts->format,
                           "text, json (same as --json) or prometheus (node-exporter textfile "
                           "collector format)")
                ->check(CLI::IsMember({"text", "json", "prometheus"}))
                ->type_name("FORMAT");
            app.add_flag("--list", opts->list, "List the checks and exit");
            app.add_flag("-v,--verbose", opts->verbose, "Show evidence for passing checks too");
            app.footer(
                "Exit codes: 0 OK, 1 WARN, 2 FAIL, 3 UNKNOWN (Nagios/NHC); 64 bad usage.\n"
                "JSON schema: docs/doctor-json.md; Prometheus metrics: docs/deploy.md.");
            return [opts](Io& io) -> int {
              auto format = choose_format(opts->common.json, opts->format, "text");
              if (!format) {
                io.err << "epkit doctor: " << format.error().message << "\n";
                return k_exit_usage;
              }
              opts->format = *format;
              if (opts->list) {
                print_list(io);
                return k_exit_ok;
              }
              for (const auto& id : opts->only) {
                if (checks::find_check(id) == nullptr) {
                  io.err << fmt::format("epkit doctor: no check '{}'; see 'epkit doctor --list'\n",
                                        id);
                  return k_exit_usage;
                }
              }
              auto host = make_host(opts->common);
              if (!host) {
                io.err << "epkit doctor: " << host.error().message << "\n";
                return k_exit_usage;
              }
              topo::Snapshot snapshot = topo::probe(*host);
              checks::Context ctx{*host, snapshot};
              checks::Report report = checks::run(ctx, opts->only);
              if (opts->format == "json") {
                io.out << util::dump_json(checks::to_json(report, ctx), 2) << "\n";
              } else if (opts->format == "prometheus") {
                io.out << checks::to_prometheus(report, ctx);
              } else {
                print_text(report, ctx, opts->verbose, io);
              }
              return checks::exit_code(report);
            };
          }};
}

}  // namespace epkit::cli
