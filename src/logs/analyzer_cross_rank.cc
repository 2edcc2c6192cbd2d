// The analyser's rules across ranks and hosts, run once every input is read:
// versions, networks and devices that differ between ranks, hosts that
// differ, devices no rank could open, NVSHMEM's transport split.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "logs/analyzer.h"
#include "logs/catalogue.h"
#include "logs/text.h"

namespace epkit::logs {

std::array<bool, 3> Analyzer::cross_rank_rules() {
  auto& ranks = m_report.ranks;
  // Values a job must agree on across ranks.
  struct Group {
    std::vector<int> members;
  };
  auto group_by = [&](auto value_of) {
    std::map<std::string, Group> groups;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      std::string v = value_of(ranks[i]);
      if (!v.empty()) groups[v].members.push_back(static_cast<int>(i));
    }
    return groups;
  };
  auto report_split = [&](Rule rule, const std::map<std::string, Group>& groups,
                          std::string_view what, auto evidence_of) {
    if (groups.size() < 2) return false;
    // The largest group is "normal"; evidence comes from the others.
    const std::string* majority = nullptr;
    std::size_t best = 0;
    for (const auto& [v, g] : groups) {
      if (g.members.size() > best) best = g.members.size(), majority = &v;
    }
    for (const auto& [v, g] : groups) {
      std::string detail = fmt::format("{}{}{}: {} rank{}", what, what.empty() ? "" : " ", v,
                                       g.members.size(), g.members.size() == 1 ? "" : "s");
      if (&v != majority) {
        detail += fmt::format(" ({}{})", ranks[static_cast<std::size_t>(g.members[0])].label,
                              g.members.size() > 1 ? ", ..." : "");
      }
      Finding& f = m_findings[static_cast<std::size_t>(rule)];
      if (f.spec == nullptr) f.spec = &spec_of(rule);
      if (f.details.size() < k_max_details) f.details.push_back(detail);
      if (&v == majority) continue;
      for (int m : g.members) {
        ++f.count;
        const Evidence& e = evidence_of(ranks[static_cast<std::size_t>(m)]);
        if (f.evidence.size() < k_max_evidence && !e.file.empty()) f.evidence.push_back(e);
        m_finding_ranks[static_cast<std::size_t>(rule)].add(m);
      }
    }
    return true;
  };
  std::array<bool, 3> split{};
  split[0] = report_split(Rule::version_mismatch,
                          group_by([](const RankFacts& r) { return r.nccl_version; }), "NCCL",
                          [](const RankFacts& r) -> const Evidence& { return r.version_at; });
  split[1] =
      report_split(Rule::net_mismatch, group_by([](const RankFacts& r) { return r.network; }),
                   "network", [](const RankFacts& r) -> const Evidence& { return r.network_at; });
  split[2] = report_split(Rule::net_mismatch, group_by([](const RankFacts& r) {
                            return r.net_name.empty() ? std::string()
                                                      : fmt::format("NET/{} devices {}", r.net_name,
                                                                    r.net_devices.size());
                          }),
                          "", [](const RankFacts& r) -> const Evidence& { return r.devices_at; });

  for (const auto& c : m_report.communicators) {
    if (c.complete_count >= c.nranks) continue;
    // A rank that logged Init START and stopped is a hang or crash; ranks that
    // logged nothing are most often files left out of the input.
    bool seen_stuck = false;
    for (int r = 0; r < c.nranks; ++r) {
      auto i = static_cast<std::size_t>(r);
      if (!c.complete[i] && (c.owner[i] >= 0 || c.unranked_seen[i])) seen_stuck = true;
    }
    Rule rule = seen_stuck ? Rule::init_incomplete : Rule::init_unseen;
    Finding& f = m_findings[static_cast<std::size_t>(rule)];
    if (f.spec == nullptr) f.spec = &spec_of(rule);
    ++f.count;
    std::string missing;
    int listed = 0, total = 0;
    bool any_pending = false;  // else the communicator's first line stands as evidence
    for (int r = 0; r < c.nranks; ++r) {
      if (c.complete[static_cast<std::size_t>(r)]) continue;
      ++total;
      if (listed >= 16) continue;
      ++listed;
      int owner = c.owner[static_cast<std::size_t>(r)];
      if (!missing.empty()) missing += ", ";
      if (owner >= 0) {
        missing += fmt::format("{} ({})", r, ranks[static_cast<std::size_t>(owner)].label);
      } else if (c.unranked_seen[static_cast<std::size_t>(r)]) {
        missing += fmt::format("{} (rank ?: its lines have no rank prefix)", r);
      } else {
        missing += fmt::format("{} (no log line)", r);
      }
      if (owner >= 0) {
        m_finding_ranks[static_cast<std::size_t>(rule)].add(owner);
      }
      auto pending = c.pending.find(r);
      if (pending != c.pending.end() && f.evidence.size() < k_max_evidence) {
        f.evidence.push_back(pending->second);
        any_pending = true;
      }
    }
    if (total > listed) missing += fmt::format(", and {} more", total - listed);
    if (f.details.size() < k_max_details) {
      f.details.push_back(
          fmt::format("commId {}: {} of {} ranks reached Init COMPLETE; missing rank{} {}",
                      c.comm_id, c.complete_count, c.nranks, total == 1 ? "" : "s", missing));
    }
    if (!any_pending && f.evidence.size() < k_max_evidence) f.evidence.push_back(c.first_at);
  }
  return split;
}

// Hosts compared fact by fact, whether or not their lines name ranks. Where
// the per-rank comparison already split on a fact it has said so (with rank
// labels); the host view adds what ranks cannot show: plugin loading and
// lines without a rank.
void Analyzer::cross_host_rules(const std::array<bool, 3>& rank_split) {
  const auto& hosts = m_report.hosts;
  if (hosts.size() < 2) return;
  struct Fact {
    Rule rule;
    std::string_view what;
    const std::string HostFacts::*value;
    const Evidence HostFacts::*at;
    bool skip;
    bool loaded_only;  // compare only hosts that loaded an external plugin
  };
  const Fact facts[] = {
      {Rule::host_version, "NCCL", &HostFacts::nccl_version, &HostFacts::version_at, rank_split[0],
       false},
      {Rule::host_plugin, "NET plugin", &HostFacts::plugin, &HostFacts::plugin_at, false, false},
      // Where no plugin loaded, the library tried is the default name: the
      // loaded-or-not comparison above already tells those hosts apart.
      {Rule::host_plugin, "NET plugin library", &HostFacts::plugin_path, &HostFacts::path_at, false,
       true},
      {Rule::host_net, "network", &HostFacts::network, &HostFacts::network_at, rank_split[1],
       false},
      {Rule::host_net, "NET devices", &HostFacts::net_devices, &HostFacts::devices_at,
       rank_split[2], false},
  };
  for (const auto& fact : facts) {
    if (fact.skip) continue;
    std::map<std::string, std::vector<std::size_t>> groups;
    for (std::size_t i = 0; i < hosts.size(); ++i) {
      const std::string& v = hosts[i].*fact.value;
      if (fact.loaded_only && !hosts[i].plugin.starts_with("external")) continue;
      if (!v.empty()) groups[v].push_back(i);
    }
    if (groups.size() < 2) continue;
    Finding f;
    f.spec = &spec_of(fact.rule);
    // Smaller sides first: they are the likely odd ones out.
    std::vector<const std::pair<const std::string, std::vector<std::size_t>>*> sides;
    for (const auto& g : groups) sides.push_back(&g);
    std::stable_sort(sides.begin(), sides.end(),
                     [](auto* a, auto* b) { return a->second.size() < b->second.size(); });
    for (const auto* side : sides) {
      std::vector<std::string> names;
      for (std::size_t i : side->second) {
        if (names.size() < 8) names.push_back(hosts[i].name);
        if (f.hosts.size() < k_max_finding_ranks) f.hosts.push_back(hosts[i].name);
      }
      std::string who = join(names, ", ");
      if (side->second.size() > names.size())
        who += fmt::format(", +{} more", side->second.size() - names.size());
      if (f.details.size() < k_max_details) {
        f.details.push_back(fmt::format("{} {}: {} host{} ({})", fact.what, side->first,
                                        side->second.size(), side->second.size() == 1 ? "" : "s",
                                        who));
      }
      const Evidence& e = hosts[side->second.front()].*fact.at;
      if (f.evidence.size() < k_max_evidence && !e.file.empty()) f.evidence.push_back(e);
    }
    for (std::size_t i = 0; i + 1 < sides.size(); ++i) f.count += sides[i]->second.size();
    m_report.findings.push_back(std::move(f));
  }
}

// An RDMA device NCCL could not open is the usual cause of a NET device count
// that differs between ranks or hosts: where both are seen, the device
// finding says so (as an error) and the mismatch names the devices.
void Analyzer::tie_unopenable_devices() {
  auto open_slot = static_cast<std::size_t>(Rule::ib_open_failed);
  Finding& open_failed = m_findings[open_slot];
  if (open_failed.spec == nullptr) return;
  Finding* mismatch = nullptr;
  auto net_slot = static_cast<std::size_t>(Rule::net_mismatch);
  if (m_findings[net_slot].spec != nullptr) mismatch = &m_findings[net_slot];
  for (auto& f : m_report.findings) {
    if (mismatch == nullptr && f.spec->rule == Rule::host_net) mismatch = &f;
  }
  if (mismatch == nullptr) return;
  if (mismatch->details.size() < k_max_details) {
    std::string devices = join(open_failed.details, ", ");
    mismatch->details.push_back(fmt::format(
        "RDMA device{} that could not be opened: {} (nccl.ib-device-unopenable)",
        open_failed.details.size() == 1 ? "" : "s", devices.empty() ? "see below" : devices));
  }
  auto tied = static_cast<std::size_t>(Rule::ib_open_failed_mismatch);
  m_findings[tied] = std::move(open_failed);
  m_findings[tied].spec = &spec_of(Rule::ib_open_failed_mismatch);
  m_finding_ranks[tied] = std::move(m_finding_ranks[open_slot]);
  m_findings[open_slot] = Finding{};
}

// A transport one PE skipped and another uses: ranks whose NVSHMEM skipped a
// device or the RDMA transport, beside ranks whose NVSHMEM ran without that.
// The skip findings then become this one, which names both sides.
void Analyzer::nvshmem_transport_split() {
  if (m_family_findings.empty()) return;
  std::vector<std::size_t> slots;
  for (std::string_view id : {"nvshmem.hca-skipped", "nvshmem.peer-memory"}) {
    int f = family_index(id);
    if (f >= 0 && m_family_findings[static_cast<std::size_t>(f)].spec != nullptr)
      slots.push_back(static_cast<std::size_t>(f));
  }
  if (slots.empty()) return;
  std::vector<bool> skipped(m_report.ranks.size(), false);
  for (std::size_t slot : slots) {
    const auto& seen = m_family_ranks[slot].seen;
    for (std::size_t r = 0; r < seen.size() && r < skipped.size(); ++r)
      skipped[r] = skipped[r] || seen[r];
  }
  std::vector<std::string> skipping, using_it;
  for (std::size_t r = 0; r < m_report.ranks.size(); ++r) {
    if (!m_report.ranks[r].nvshmem) continue;
    (skipped[r] ? skipping : using_it).push_back(m_report.ranks[r].label);
  }
  if (skipping.empty() || using_it.empty()) return;
  auto slot = static_cast<std::size_t>(Rule::nvshmem_transport_split);
  Finding& split = m_findings[slot];
  split.spec = &spec_of(Rule::nvshmem_transport_split);
  auto side = [](const std::vector<std::string>& v) {
    std::vector<std::string> head(
        v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(v.size(), 6)));
    return join(head, ", ") +
           (v.size() > head.size() ? fmt::format(", +{} more", v.size() - head.size()) : "");
  };
  split.details.push_back(fmt::format("skipped by {} rank{}: {}", skipping.size(),
                                      skipping.size() == 1 ? "" : "s", side(skipping)));
  split.details.push_back(fmt::format("not skipped by {} rank{}: {}", using_it.size(),
                                      using_it.size() == 1 ? "" : "s", side(using_it)));
  for (std::size_t fam : slots) {
    Finding& f = m_family_findings[fam];
    split.count += f.count;
    split.unranked += f.unranked;
    for (auto& e : f.evidence)
      if (split.evidence.size() < k_max_evidence) split.evidence.push_back(std::move(e));
    for (auto& d : f.details)
      if (split.details.size() < k_max_details) split.details.push_back(std::move(d));
    for (std::size_t r = 0; r < m_family_ranks[fam].seen.size(); ++r)
      if (m_family_ranks[fam].seen[r]) m_finding_ranks[slot].add(static_cast<int>(r));
    f = Finding{};
  }
}

}  // namespace epkit::logs
