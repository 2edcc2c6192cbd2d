#include "checks/nic_traffic.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace epkit::checks {

namespace {

// A NIC the plan gives at most this share of the GPUs is not meant to carry
// the bulk: above it (3 GPUs on one NIC, 1 on another) a large share is the plan.
constexpr double k_max_planned_share = 0.5;

std::string nic_port(const std::string& nic, int port) {
  return fmt::format("{}:{}", nic, port);
}

std::string gpu_names(const std::vector<int>& gpus) {
  std::vector<std::string> names;
  for (int g : gpus) names.push_back(fmt::format("GPU{}", g));
  return fmt::format("{}", fmt::join(names, ","));
}

std::string percent(double share) {
  return fmt::format("{:.0f}%", share * 100.0);
}

// How to force the plan: per rank for NCCL's network leg, the mapping for
// DeepEP/NVSHMEM, and the node's list that keeps NCCL on the rail NICs.
std::string force_fix(const std::vector<topo::NicChoice>& plan) {
  std::vector<std::string> per_rank;
  for (const auto& c : plan) {
    if (!c.nic.empty()) per_rank.push_back(fmt::format("GPU{} {}", c.gpu, rank_nccl_ib_hca(c)));
  }
  return fmt::format(
      "pin each rank to its GPU's NIC: NCCL_IB_HCA per rank ({}); for DeepEP/NVSHMEM "
      "DEEP_EP_DEVICE_TO_HCA_MAPPING={}; NCCL_IB_HCA={} for the node keeps NCCL on these NICs "
      "(`epkit env` prints the node's set, `epkit topo` the map)",
      fmt::join(per_rank, ", "), topo::deep_ep_mapping(plan), topo::nccl_ib_hca(plan));
}

struct Judged {
  const PlannedNic* planned = nullptr;
  const topo::NicTraffic* traffic = nullptr;
  double expected_share = 0;  // of the judged bytes, from the plan's GPU count
};

const topo::NicTraffic* find_row(const std::vector<topo::NicTraffic>& rows, const std::string& nic,
                                 int port) {
  for (const auto& t : rows) {
    if (t.nic == nic && t.port == port) return &t;
  }
  return nullptr;
}

void add_traffic_evidence(Outcome& out, const std::vector<Judged>& judged, std::uint64_t total) {
  for (const auto& j : judged) {
    const std::uint64_t bytes = j.traffic->bytes();
    out.add(
        nic_port(j.planned->nic, j.planned->port),
        fmt::format("{} ({} of the planned NICs' bytes; planned for {})", format_gb(bytes),
                    percent(total ? static_cast<double>(bytes) / static_cast<double>(total) : 0),
                    gpu_names(j.planned->gpus)),
        j.traffic->source_path);
  }
}

}  // namespace

std::string format_gb(std::uint64_t bytes) {
  return fmt::format("{:.2f} GB", static_cast<double>(bytes) / 1e9);
}

std::string rank_nccl_ib_hca(const topo::NicChoice& choice) {
  // Not "=" + string: GCC 12 at -O3 warns (-Wrestrict, a false positive).
  return fmt::format("={}", topo::nvshmem_hca_list(choice));
}

std::vector<PlannedNic> planned_nics(const std::vector<topo::NicChoice>& plan) {
  std::vector<PlannedNic> out;
  for (const auto& c : plan) {
    if (c.nic.empty()) continue;
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const PlannedNic& p) { return p.nic == c.nic && p.port == c.port; });
    if (it == out.end()) it = out.insert(out.end(), PlannedNic{c.nic, c.port, {}});
    it->gpus.push_back(c.gpu);
  }
  return out;
}

std::vector<topo::NicChoice> plan_for_gpus(const std::vector<topo::NicChoice>& all,
                                           const std::vector<int>& gpus) {
  std::set<int> wanted(gpus.begin(), gpus.end());
  std::vector<topo::NicChoice> out;
  for (const auto& c : all) {
    if (wanted.count(c.gpu) != 0) out.push_back(c);
  }
  return out;
}

NicTrafficReport check_nic_traffic(const std::vector<topo::NicChoice>& plan,
                                   const topo::NicCounterSnapshot& before,
                                   const topo::NicCounterSnapshot& after,
                                   const NicTrafficLimits& limits) {
  NicTrafficReport r;
  r.planned = planned_nics(plan);
  r.traffic = topo::traffic_between(before, after);
  auto add = [&r](std::string id, Outcome outcome) {
    r.worst = worse(r.worst, outcome.status);
    r.findings.push_back({std::move(id), std::move(outcome)});
  };
  if (r.planned.empty()) {
    add("nic.no-plan", skip("no RDMA NIC is planned for these GPUs: NIC traffic not checked"));
    return r;
  }

  // Port counters when any planned NIC has them; netdev bytes (which can
  // miss kernel-bypass RDMA traffic) only when none has.
  std::vector<const topo::NicTraffic*> rows;
  for (const auto& p : r.planned) rows.push_back(find_row(r.traffic, p.nic, p.port));
  topo::CounterSource source = topo::CounterSource::none;
  for (auto want : {topo::CounterSource::rdma_port, topo::CounterSource::netdev}) {
    for (const auto* t : rows) {
      if (source == topo::CounterSource::none && t && t->known() && t->source == want) {
        source = want;
      }
    }
  }

  std::vector<Judged> judged;
  Outcome unknowns;
  std::vector<std::string> unknown_names;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& p = r.planned[i];
    const auto* t = rows[i];
    std::string why;
    if (t == nullptr) {
      why = "not in /sys/class/infiniband after the run";
    } else if (!t->known()) {
      why = t->unknown;
    } else if (t->source != source) {
      why =
          fmt::format("counted by {} while other NICs have port counters: not compared", t->netdev);
    } else {
      judged.push_back({&p, t, 0});
      continue;
    }
    unknown_names.push_back(nic_port(p.nic, p.port));
    unknowns.add(nic_port(p.nic, p.port), why,
                 t && !t->source_path.empty() ? t->source_path : "/sys/class/infiniband");
  }
  if (judged.empty()) {
    unknowns.status = Status::unknown;
    unknowns.summary =
        fmt::format("no readable NIC counter for the {} planned NIC{}: NIC traffic not checked",
                    r.planned.size(), r.planned.size() == 1 ? "" : "s");
    if (!after.note.empty()) unknowns.add("node", after.note, "/sys/class/infiniband");
    add("nic.counters-unknown", std::move(unknowns));
    return r;
  }
  if (!unknown_names.empty()) {
    unknowns.status = Status::unknown;
    unknowns.summary =
        fmt::format("counters of {} unknown: left out of the check", fmt::join(unknown_names, ","));
    add("nic.counters-unknown", std::move(unknowns));
  }

  std::uint64_t total = 0;
  std::size_t planned_gpus = 0;
  for (const auto& j : judged) {
    total += j.traffic->bytes();
    planned_gpus += j.planned->gpus.size();
  }
  for (auto& j : judged) {
    j.expected_share =
        static_cast<double>(j.planned->gpus.size()) / static_cast<double>(planned_gpus);
  }
  const std::uint64_t threshold = limits.min_bytes_per_nic * judged.size();
  if (total < threshold) {
    // Little on the planned NICs: did the traffic take other NICs?
    std::uint64_t other_total = 0;
    Outcome off;
    for (const auto& t : r.traffic) {
      bool is_planned = std::any_of(r.planned.begin(), r.planned.end(), [&](const PlannedNic& p) {
        return p.nic == t.nic && p.port == t.port;
      });
      if (is_planned || !t.known() || t.source != source || t.bytes() == 0) continue;
      other_total += t.bytes();
      off.add(nic_port(t.nic, t.port), format_gb(t.bytes()), t.source_path);
    }
    if (other_total >= threshold) {
      off.status = Status::warn;
      off.summary = fmt::format(
          "the planned NICs moved {} while NICs the plan does not use moved {}: the run's "
          "traffic took other NICs (or another job's traffic ran on them)",
          format_gb(total), format_gb(other_total));
      off.expected = "the run's traffic on the planned NICs";
      off.fix = force_fix(plan);
      add_traffic_evidence(off, judged, total);
      add("nic.off-plan", std::move(off));
    } else {
      add("nic.little-traffic",
          skip(fmt::format("the planned NICs moved {}, under the {} needed to judge ({} per NIC): "
                           "NIC use not checked",
                           format_gb(total), format_gb(threshold),
                           format_gb(limits.min_bytes_per_nic))));
    }
    return r;
  }

  const auto top = std::max_element(
      judged.begin(), judged.end(),
      [](const Judged& a, const Judged& b) { return a.traffic->bytes() < b.traffic->bytes(); });
  const double top_share = static_cast<double>(top->traffic->bytes()) / static_cast<double>(total);
  // An unknown planned NIC could hold bytes that would lower the share.
  const bool single = unknown_names.empty() && judged.size() >= 2 &&
                      top_share >= limits.single_nic_share &&
                      top->expected_share <= k_max_planned_share;
  if (single) {
    std::vector<std::string> moved;  // GPUs planned elsewhere, with their NIC
    for (const auto& c : plan) {
      if (!c.nic.empty() && (c.nic != top->planned->nic || c.port != top->planned->port)) {
        moved.push_back(fmt::format("GPU{} {}", c.gpu, nic_port(c.nic, c.port)));
      }
    }
    Outcome out = warn(
        fmt::format("{} carried {} of the {} the planned NICs moved, while the plan spreads {} "
                    "GPUs over {} NICs: the other GPUs' traffic went through it instead of their "
                    "own NIC ({})",
                    nic_port(top->planned->nic, top->planned->port), percent(top_share),
                    format_gb(total), planned_gpus, judged.size(), fmt::join(moved, ", ")),
        fmt::format("about {} of the bytes on {} (its share of the GPUs), each GPU's traffic on "
                    "its own NIC",
                    percent(top->expected_share), nic_port(top->planned->nic, top->planned->port)),
        force_fix(plan));
    add_traffic_evidence(out, judged, total);
    add("nic.single-nic", std::move(out));
    return r;
  }

  std::vector<std::string> unused;
  for (const auto& j : judged) {
    const double expected = j.expected_share * static_cast<double>(total);
    if (static_cast<double>(j.traffic->bytes()) < limits.unused_fraction * expected) {
      unused.push_back(fmt::format("{} ({}, planned for {})",
                                   nic_port(j.planned->nic, j.planned->port),
                                   format_gb(j.traffic->bytes()), gpu_names(j.planned->gpus)));
    }
  }
  if (!unused.empty()) {
    Outcome out = warn(
        fmt::format("{} of {} planned NICs moved (almost) nothing while the others moved {}: {}; "
                    "their GPUs' traffic went through other NICs",
                    unused.size(), judged.size(), format_gb(total), fmt::join(unused, "; ")),
        "every planned NIC carrying its GPUs' share", force_fix(plan));
    add_traffic_evidence(out, judged, total);
    add("nic.unused", std::move(out));
  }
  return r;
}

}  // namespace epkit::checks
