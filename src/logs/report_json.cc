#include "logs/report_json.h"

#include <algorithm>

namespace epkit::logs {
namespace {

nlohmann::json counts_json(const std::vector<Count>& counts) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& c : sorted_counts(counts)) out[c.name] = c.count;
  return out;
}

nlohmann::json interfaces_json(const std::vector<Interface>& ifs) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& i : ifs) out.push_back({{"name", i.name}, {"address", i.address}});
  return out;
}

nlohmann::json evidence_json(const Report& report, const Evidence& e) {
  return {
      {"file", e.file},
      {"line", e.line},
      {"text", e.text},
      {"rank", e.rank < 0 ? nlohmann::json(nullptr) : nlohmann::json(report.rank_label(e.rank))}};
}

nlohmann::json rank_json(const RankFacts& r) {
  return {
      {"label", r.label},
      {"host", r.host},
      {"pid", r.pid},
      {"cuda_dev", r.cuda_dev},
      {"launcher_rank", r.launcher_rank},
      {"nccl_version", r.nccl_version},
      {"network", r.network},
      {"net_plugin", r.net_name},
      {"net_devices", r.net_devices},
      {"oob", interfaces_json(r.oob)},
      {"bootstrap", interfaces_json(r.bootstrap)},
      {"gdr",
       {{"enabled_hcas", r.gdr_enabled},
        {"disabled_hcas", r.gdr_disabled},
        {"disabled_by_distance", r.gdr_distance_disabled}}},
      {"transports", counts_json(r.transports)},
      {"collectives", counts_json(r.collectives)},
      {"lines", r.lines},
  };
}

const char* to_string(NotLog kind) {
  switch (kind) {
    case NotLog::empty:
      return "empty";
    case NotLog::binary:
      return "binary";
    case NotLog::no_log_lines:
      return "no_log_lines";
  }
  return "?";
}

}  // namespace

std::vector<Count> sorted_counts(const std::vector<Count>& counts) {
  std::vector<Count> out = counts;
  std::sort(out.begin(), out.end(), [](const Count& a, const Count& b) { return a.name < b.name; });
  return out;
}

nlohmann::json to_json(const Report& report) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : report.ranks) ranks.push_back(rank_json(r));
  nlohmann::json hosts = nlohmann::json::array();
  for (const auto& h : report.hosts) {
    hosts.push_back({{"name", h.name},
                     {"nccl_version", h.nccl_version},
                     {"network", h.network},
                     {"net_devices", h.net_devices},
                     {"net_plugin", h.plugin},
                     {"net_plugin_library", h.plugin_path}});
  }
  nlohmann::json launches = nlohmann::json::array();
  for (const auto& l : report.launches) {
    launches.push_back({{"command", l.command},
                        {"hosts", l.hosts},
                        {"env", l.env},
                        {"evidence", evidence_json(report, l.at)}});
  }
  nlohmann::json not_logs = nlohmann::json::array();
  for (const auto& n : report.not_logs)
    not_logs.push_back({{"file", n.file}, {"kind", to_string(n.kind)}, {"reason", n.reason}});
  nlohmann::json comms = nlohmann::json::array();
  for (const auto& c : report.communicators) {
    std::vector<int> complete, missing;
    for (int i = 0; i < c.nranks; ++i)
      (c.complete[static_cast<std::size_t>(i)] ? complete : missing).push_back(i);
    nlohmann::json missing_json = nlohmann::json::array();
    for (int i : missing) {
      int owner = c.owner[static_cast<std::size_t>(i)];
      missing_json.push_back(
          {{"rank", i},
           {"label", owner >= 0 ? report.ranks[static_cast<std::size_t>(owner)].label : ""}});
    }
    comms.push_back({{"comm_id", c.comm_id},
                     {"nranks", c.nranks},
                     {"init_complete", c.complete_count},
                     {"missing", std::move(missing_json)}});
  }
  nlohmann::json findings = nlohmann::json::array();
  for (const auto& f : report.findings) {
    nlohmann::json ev = nlohmann::json::array();
    for (const auto& e : f.evidence) ev.push_back(evidence_json(report, e));
    findings.push_back({
        {"id", std::string(f.spec->id)},
        {"severity", to_string(f.spec->severity)},
        {"title", std::string(f.spec->title)},
        {"count", f.count},
        {"ranks", f.ranks},
        {"rank_count", f.rank_count},
        {"unranked_lines", f.unranked},
        {"hosts", f.hosts},
        {"details", f.details},
        {"evidence", std::move(ev)},
        {"cause", std::string(f.spec->cause)},
        {"fix", std::string(f.spec->fix)},
        {"look_for",
         f.look_for.empty() ? nlohmann::json(nullptr) : nlohmann::json(std::string(f.look_for))},
        {"doctor_check", f.spec->doctor_check.empty()
                             ? nlohmann::json(nullptr)
                             : nlohmann::json(std::string(f.spec->doctor_check))},
    });
  }
  nlohmann::json out = {
      {"schema", "epkit.logs/1"},
      {"epkit_version", EPKIT_VERSION},
      {"files", report.files},
      {"bytes", report.bytes},
      {"lines", report.lines},
      {"ranks", std::move(ranks)},
      {"unattributed_lines", report.unattributed_lines},
      {"unranked", report.unranked.lines == 0 && report.unranked.nccl_version.empty() &&
                           report.unranked.network.empty() && report.unranked.net_name.empty()
                       ? nlohmann::json(nullptr)
                       : rank_json(report.unranked)},
      {"hosts", std::move(hosts)},
      {"launches", std::move(launches)},
      {"not_logs", std::move(not_logs)},
      {"communicators", std::move(comms)},
      {"findings", std::move(findings)},
      {"worst", report.findings.empty() ? "none" : to_string(report.worst)},
      {"no_log", report.no_log_at_all()},
      {"exit_code", report.exit_code()},
  };
  if (report.sliced) {
    nlohmann::json slices = nlohmann::json::array();
    for (std::size_t i = 0; i < report.slices.size(); ++i) {
      slices.push_back({{"index", i},
                        {"marker", report.slices[i].marker},
                        {"collectives", counts_json(report.slices[i].collectives)}});
    }
    out["slices"] = std::move(slices);
  }
  return out;
}

}  // namespace epkit::logs
