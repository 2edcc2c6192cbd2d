#include "checks/nic_watch.h"

#include <fmt/format.h>

#include <algorithm>

#include "host/dl/nvml.h"

namespace epkit::checks {

namespace {

// Evidence rows shown per finding after a run; the rest are counted.
constexpr std::size_t k_evidence_lines = 8;

std::string traffic_cell(const topo::NicTraffic& t) {
  std::string name = fmt::format("{}:{}", t.nic, t.port);
  if (!t.known()) return name + " unknown";
  if (t.bytes() == 0) return name + " 0.00 GB";
  return fmt::format("{} {} (tx {:.2f}, rx {:.2f})", name, format_gb(t.bytes()),
                     static_cast<double>(*t.tx_bytes) / 1e9,
                     static_cast<double>(*t.rx_bytes) / 1e9);
}

}  // namespace

std::string nic_map_line(const std::vector<topo::NicChoice>& plan) {
  std::vector<std::string> cells;
  for (const auto& c : plan) {
    if (c.nic.empty()) {
      cells.push_back(fmt::format("GPU{} -> none", c.gpu));
      continue;
    }
    cells.push_back(fmt::format("GPU{} -> {}:{} ({}{})", c.gpu, c.nic, c.port,
                                topo::to_string(c.path), c.port_active ? "" : ", port not ACTIVE"));
  }
  if (cells.empty()) return "NIC map: no GPU";
  return fmt::format("NIC map: {}", fmt::join(cells, ", "));
}

std::string nic_env_line(const std::vector<topo::NicChoice>& plan) {
  std::vector<std::string> per_rank;
  for (const auto& c : plan) {
    if (!c.nic.empty())
      per_rank.push_back(fmt::format("GPU{} {}", c.gpu, topo::nvshmem_hca_list(c)));
  }
  if (per_rank.empty()) return {};
  return fmt::format(
      "NIC env: NCCL_IB_HCA={} per node; per rank NCCL_IB_HCA==<its NIC> and NVSHMEM_HCA_LIST=<its "
      "NIC> ({}); DEEP_EP_DEVICE_TO_HCA_MAPPING={}",
      topo::nccl_ib_hca(plan), fmt::join(per_rank, ", "), topo::deep_ep_mapping(plan));
}

std::vector<std::string> nic_summary_lines(const NicTrafficReport& report) {
  std::vector<std::string> lines;
  // The planned NICs first, then any other that moved data.
  std::vector<std::string> cells;
  topo::CounterSource source = topo::CounterSource::none;
  for (const auto& p : report.planned) {
    auto it =
        std::find_if(report.traffic.begin(), report.traffic.end(),
                     [&](const topo::NicTraffic& t) { return t.nic == p.nic && t.port == p.port; });
    if (it == report.traffic.end()) {
      cells.push_back(fmt::format("{}:{} unknown", p.nic, p.port));
      continue;
    }
    cells.push_back(traffic_cell(*it));
    if (source == topo::CounterSource::none && it->known()) source = it->source;
  }
  for (const auto& t : report.traffic) {
    bool planned =
        std::any_of(report.planned.begin(), report.planned.end(),
                    [&](const PlannedNic& p) { return p.nic == t.nic && p.port == t.port; });
    if (!planned && t.known() && t.bytes() > 0) cells.push_back(traffic_cell(t) + " [not planned]");
  }
  if (!cells.empty()) {
    lines.push_back(
        source == topo::CounterSource::none
            ? fmt::format("NIC traffic: {}", fmt::join(cells, ", "))
            : fmt::format("NIC traffic ({}, GB): {}", to_string(source), fmt::join(cells, ", ")));
  }
  if (report.findings.empty() && !report.planned.empty()) {
    lines.push_back(
        fmt::format("NIC check: OK, traffic spread over the {} planned NIC{} as planned",
                    report.planned.size(), report.planned.size() == 1 ? "" : "s"));
  }
  for (const auto& f : report.findings) {
    const Outcome& o = f.outcome;
    lines.push_back(fmt::format("NIC check: {} {}: {}", to_string(o.status), f.id, o.summary));
    std::size_t shown = std::min(o.evidence.size(), k_evidence_lines);
    for (std::size_t i = 0; i < shown; ++i) {
      const auto& e = o.evidence[i];
      lines.push_back(fmt::format("  {} = {} ({})", e.key, e.value, e.source));
    }
    if (shown < o.evidence.size()) {
      lines.push_back(fmt::format("  ... {} more", o.evidence.size() - shown));
    }
    if (!o.expected.empty()) lines.push_back("  expected: " + o.expected);
    if (!o.fix.empty()) lines.push_back("  fix: " + o.fix);
  }
  return lines;
}

std::optional<int> gpu_index_of_bdf(const topo::Snapshot& snap, const std::string& bdf) {
  const std::string want = host::dl::normalize_bus_id(bdf);
  for (const auto& g : snap.gpus) {
    if (host::dl::normalize_bus_id(g.pci.bdf) == want) return g.index;
  }
  return std::nullopt;
}

Result<std::vector<int>> gpu_indices_of_bus_ids(const topo::Snapshot& snap,
                                                const std::vector<std::string>& bus_ids) {
  std::vector<int> out;
  for (const auto& id : bus_ids) {
    auto index = gpu_index_of_bdf(snap, id);
    if (!index) {
      return make_error(ErrorCode::invalid,
                        fmt::format("GPU {} is not in this node's topology ({} GPUs under {})", id,
                                    snap.gpus.size(), snap.sysroot.empty() ? "/" : snap.sysroot));
    }
    if (std::find(out.begin(), out.end(), *index) == out.end()) out.push_back(*index);
  }
  std::sort(out.begin(), out.end());
  return out;
}

NicWatch::NicWatch(host::Sysroot fs, const topo::Snapshot& snap, const std::vector<int>& gpus,
                   NicTrafficLimits limits)
    : m_fs(std::move(fs)), m_plan(plan_for_gpus(topo::assign_nics(snap), gpus)), m_limits(limits) {}

std::vector<std::string> NicWatch::start() {
  m_before = topo::read_nic_counters(m_fs);
  std::vector<std::string> lines = {nic_map_line(m_plan)};
  std::string env = nic_env_line(m_plan);
  if (env.empty()) {
    lines.push_back(
        "NIC env: no RDMA NIC for these GPUs; NCCL's network leg uses what NCCL finds (sockets)");
    return lines;
  }
  lines.push_back(std::move(env));
  std::size_t readable = 0;
  std::string first_reason;
  auto planned = planned_nics(m_plan);
  for (const auto& p : planned) {
    auto it =
        std::find_if(m_before->ports.begin(), m_before->ports.end(),
                     [&](const topo::NicCounter& c) { return c.nic == p.nic && c.port == p.port; });
    if (it != m_before->ports.end() && it->unknown.empty()) {
      ++readable;
    } else if (first_reason.empty()) {
      first_reason =
          it == m_before->ports.end()
              ? (m_before->note.empty() ? p.nic + " has no port " + std::to_string(p.port)
                                        : m_before->note)
              : it->unknown;
    }
  }
  if (readable == planned.size()) {
    lines.push_back(
        fmt::format("NIC counters: readable on the {} planned NIC{}: checked after the run",
                    planned.size(), planned.size() == 1 ? "" : "s"));
  } else {
    lines.push_back(fmt::format("NIC counters: readable on {} of {} planned NICs ({})", readable,
                                planned.size(), first_reason));
  }
  return lines;
}

NicWatchResult NicWatch::finish() const {
  NicWatchResult result;
  topo::NicCounterSnapshot after = topo::read_nic_counters(m_fs);
  topo::NicCounterSnapshot before;
  if (m_before) {
    before = *m_before;
  } else {
    // No first reading: every port is unknown "before", so nothing is judged.
    before.note = "no reading before the run (NicWatch::start was not called)";
  }
  result.report = check_nic_traffic(m_plan, before, after, m_limits);
  result.lines = nic_summary_lines(result.report);
  return result;
}

}  // namespace epkit::checks
