#include "checks/report_json.h"

#include <string>

namespace epkit::checks {
namespace {

std::string lower(Status s) {
  std::string out = to_string(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

nlohmann::json to_json(const Report& report, const Context& ctx) {
  nlohmann::json checks = nlohmann::json::array();
  for (const auto& run : report.runs) {
    nlohmann::json evidence = nlohmann::json::array();
    for (const auto& e : run.outcome.evidence) {
      evidence.push_back({{"key", e.key}, {"value", e.value}, {"source", e.source}});
    }
    checks.push_back({
        {"id", std::string(run.check->id)},
        {"group", std::string(group_of(run.check->id))},
        {"title", std::string(run.check->title)},
        {"status", lower(run.outcome.status)},
        {"summary", run.outcome.summary},
        {"evidence", std::move(evidence)},
        {"expected", run.outcome.expected},
        {"fix", run.outcome.fix},
        {"millis", run.millis},
    });
  }
  nlohmann::json counts = {{"pass", 0}, {"warn", 0}, {"fail", 0}, {"skip", 0}, {"unknown", 0}};
  for (const auto& run : report.runs)
    counts[lower(run.outcome.status)] = counts[lower(run.outcome.status)].get<int>() + 1;
  return {
      {"schema", "epkit.doctor/1"},
      {"epkit_version", EPKIT_VERSION},
      {"sysroot", ctx.host.fs().is_live() ? std::string("/") : ctx.host.fs().root()},
      {"env_origin", ctx.host.env().origin()},
      {"node", {{"gpus", ctx.topo.gpus.size()}, {"rdma_devices", ctx.topo.nics.size()}}},
      {"status", lower(report.worst)},
      {"exit_code", exit_code(report)},
      {"counts", counts},
      {"millis", report.millis},
      {"checks", std::move(checks)},
  };
}

}  // namespace epkit::checks
