#include "checks/report_prometheus.h"

#include <fmt/format.h>

#include <array>

namespace epkit::checks {
namespace {

constexpr std::array k_statuses = {Status::pass, Status::warn, Status::fail, Status::skip,
                                   Status::unknown};

// The label values: the JSON report's words (docs/doctor-json.md).
std::string_view lower(Status s) {
  constexpr std::array<std::string_view, k_statuses.size()> words = {"pass", "warn", "fail", "skip",
                                                                     "unknown"};
  return words[static_cast<std::size_t>(s)];
}

void family(std::string& out, std::string_view name, std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", name, help, name);
}

}  // namespace

std::string prometheus_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string to_prometheus(const Report& report, const Context& ctx) {
  std::string out;
  family(out, "epkit_doctor_check_status",
         "Result of one epkit doctor check: 1 for the status it ended in, 0 for the others.");
  for (const auto& run : report.runs) {
    auto id = prometheus_label_value(run.check->id);
    auto group = prometheus_label_value(group_of(run.check->id));
    for (Status s : k_statuses) {
      out +=
          fmt::format("epkit_doctor_check_status{{check=\"{}\",group=\"{}\",status=\"{}\"}} {}\n",
                      id, group, lower(s), run.outcome.status == s ? 1 : 0);
    }
  }
  std::array<int, k_statuses.size()> counts{};
  for (const auto& run : report.runs) ++counts[static_cast<std::size_t>(run.outcome.status)];
  family(out, "epkit_doctor_checks", "Number of epkit doctor checks that ended in each status.");
  for (Status s : k_statuses) {
    out += fmt::format("epkit_doctor_checks{{status=\"{}\"}} {}\n", lower(s),
                       counts[static_cast<std::size_t>(s)]);
  }
  family(out, "epkit_doctor_exit_code",
         "Exit code of epkit doctor (Nagios): 0 OK, 1 WARN, 2 FAIL, 3 UNKNOWN.");
  out += fmt::format("epkit_doctor_exit_code {}\n", exit_code(report));
  family(out, "epkit_doctor_duration_seconds", "Time the epkit doctor checks took.");
  out += fmt::format("epkit_doctor_duration_seconds {:.6f}\n", report.millis / 1000.0);
  family(out, "epkit_doctor_gpus", "NVIDIA GPUs epkit doctor found on this node.");
  out += fmt::format("epkit_doctor_gpus {}\n", ctx.topo.gpus.size());
  family(out, "epkit_doctor_rdma_devices", "RDMA devices epkit doctor found on this node.");
  out += fmt::format("epkit_doctor_rdma_devices {}\n", ctx.topo.nics.size());
  family(out, "epkit_build_info", "Version of the epkit binary that wrote these metrics.");
  out +=
      fmt::format("epkit_build_info{{version=\"{}\"}} 1\n", prometheus_label_value(EPKIT_VERSION));
  return out;
}

}  // namespace epkit::checks
