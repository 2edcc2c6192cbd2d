#include "env/lint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "env/known_vars.h"
#include "env/shell.h"
#include "host/env.h"
#include "topo/device_filter.h"
#include "topo/hca_list.h"

namespace epkit::env {
namespace {

std::string export_line(const std::string& name, const std::string& value) {
  return fmt::format("export {}={}", name, shell_word(value));
}

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// What a device list selects on the node, sorted, for comparing two lists.
std::vector<std::string> selection(const std::string& name, const std::string& value,
                                   const topo::Snapshot& snap) {
  topo::DeviceFilter filter = topo::parse_device_filter(value);
  std::vector<std::string> out;
  if (name == "NCCL_IB_HCA") {
    out = topo::resolve_hca_filter(filter, snap);
  } else {
    for (const auto& dev : snap.netdevs) {
      if (filter.selects(dev.name)) out.push_back(dev.name);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string list_text(const std::vector<std::string>& items) {
  return fmt::format("{}", fmt::join(items, " "));
}

// NCCL_IB_HCA unset: NCCL opens every RDMA device's ACTIVE ports. When those
// are exactly the plan's rails, its default is the plan; "" otherwise.
std::string default_hca_is_plan(const Setting& s, const topo::Snapshot& snap) {
  std::vector<std::string> all;
  for (const auto& nic : snap.nics) {
    for (const auto& port : nic.ports) {
      if (port.state_code == 4 || port.state == "ACTIVE") {
        all.push_back(fmt::format("{}:{}", nic.name, port.port));
      }
    }
  }
  std::sort(all.begin(), all.end());
  if (all.empty() || all != selection(s.name, s.value, snap)) return {};
  return fmt::format(
      "NCCL_IB_HCA is not set: NCCL's default, every RDMA device with an active port, is "
      "exactly the {} rail NICs here ({}), so it picks the same NICs as the plan",
      all.size(), list_text(all));
}

// NCCL_SOCKET_IFNAME selecting some of the plan's interfaces: NCCL's
// bootstrap and socket traffic need one routable interface, so fewer is
// fine; "" otherwise (none selected, or one the plan leaves out).
std::string socket_subset(const Setting& s, const std::string& have, const topo::Snapshot& snap) {
  std::vector<std::string> chosen = selection(s.name, have, snap);
  std::vector<std::string> planned = selection(s.name, s.value, snap);
  if (chosen.empty()) return {};
  for (const auto& name : chosen) {
    if (!contains(planned, name)) return {};
  }
  return fmt::format(
      "NCCL_SOCKET_IFNAME={} selects {} of the {} usable interfaces ({}): NCCL's bootstrap and "
      "socket traffic need only one routable interface",
      have, list_text(chosen), planned.size(), list_text(planned));
}

bool same_value(const Setting& s, const std::string& have, const topo::Snapshot& snap) {
  if (have == s.value) return true;
  if (s.name == "NCCL_SOCKET_IFNAME" || s.name == "NCCL_IB_HCA") {
    return selection(s.name, have, snap) == selection(s.name, s.value, snap);
  }
  return false;
}

void lint_setting(const Setting& s, const host::Env& job, const topo::Snapshot& snap,
                  std::vector<LintItem>& out) {
  auto have = job.get(s.name);
  bool per_rank = !s.per_rank.empty() && s.value.empty();
  if (per_rank && (!have || have->empty())) return;  // the job file is node-wide
  std::string want =
      per_rank ? fmt::format("one of {} (by local rank)", fmt::join(s.per_rank, " ")) : s.value;
  std::string fix = per_rank ? fmt::format(
                                   "eval \"$(epkit env --local-rank \"$LOCAL_RANK\")\" "
                                   "(or the LOCAL_RANK case block of `epkit env`)")
                             : export_line(s.name, s.value);
  if ((!have || have->empty()) && s.name == "NCCL_IB_HCA") {
    if (std::string why = default_hca_is_plan(s, snap); !why.empty()) {
      out.push_back({Problem::missing, false, s.name, "", want, why, fix, why});
      return;
    }
  }
  if (!have || have->empty()) {
    out.push_back({Problem::missing, s.strength == Strength::enforced, s.name, "", want,
                   fmt::format("{} is not set: {} ({})", s.name, s.why, s.fact),
                   s.path_list ? fmt::format("export {}={}${{{}:+:${}}}", s.name,
                                             shell_word(s.value), s.name, s.name)
                               : fix});
    return;
  }
  if (s.path_list) {
    std::vector<std::string> entries = host::split_path_list(*have);
    std::vector<std::string> absent;
    for (const auto& dir : host::split_path_list(s.value)) {
      if (!contains(entries, dir)) absent.push_back(dir);
    }
    if (!absent.empty()) {
      out.push_back({Problem::different, false, s.name, *have, s.value,
                     fmt::format("{} lacks {} ({})", s.name, fmt::join(absent, ":"), s.fact),
                     fmt::format("export {}={}:${}", s.name,
                                 shell_word(fmt::format("{}", fmt::join(absent, ":"))), s.name)});
    }
    return;
  }
  bool same = per_rank ? contains(s.per_rank, *have) : same_value(s, *have, snap);
  if (same) return;
  if (s.name == "NCCL_SOCKET_IFNAME") {
    if (std::string why = socket_subset(s, *have, snap); !why.empty()) {
      out.push_back({Problem::different, false, s.name, *have, want, why, fix, why});
      return;
    }
  }
  out.push_back(
      {Problem::different, s.strength == Strength::enforced, s.name, *have, want,
       fmt::format("{}={} but this node needs {}: {} ({})", s.name, *have, want, s.why, s.fact),
       fix});
}

// The version rule: a name the found release of its library does not read.
void lint_version(const std::string& name, const Plan& plan, std::vector<LintItem>& out) {
  const VarSpec* spec = find_var(name);
  if (spec == nullptr) return;
  std::optional<Version> found;
  Version floor;
  if (spec->library == Library::nccl) {
    found = plan.nccl;
    floor = k_nccl_floor;
  } else if (spec->library == Library::nvshmem) {
    found = plan.nvshmem;
    floor = k_nvshmem_floor;
  } else {
    return;
  }
  std::string lib = to_string(spec->library);
  if (found && !reads(*spec, *found)) {
    out.push_back({Problem::unread, false, name, "", "",
                   fmt::format("{} {} on this node does not read {} (read by {} {}{}; {})", lib,
                               found->str(), name, lib, spec->since.str(),
                               spec->until == Version{} ? " and later"
                                                        : fmt::format(" to {}", spec->until.str()),
                               spec->source),
                   fmt::format("unset {}", name)});
  } else if (!found && spec->until != Version{} && spec->until < floor) {
    out.push_back({Problem::unread, false, name, "", "",
                   fmt::format("{} {} and later do not read {} (last read by {}; {})", lib,
                               floor.str(), name, spec->until.str(), spec->source),
                   fmt::format("unset {}", name)});
  }
}

void lint_name(const std::string& name, const std::string& value, const Plan& plan,
               std::vector<LintItem>& out) {
  bool family = name.starts_with("NCCL_") || name.starts_with("NVSHMEM_");
  if (!family) return;
  auto reader = who_reads(name);
  if (!reader) {
    auto near = nearest_known(name);
    out.push_back(
        {Problem::misspelt, false, name, value, "",
         fmt::format("no library reads {}; nearest known name: {} (edit distance {})", name,
                     near.name, near.distance),
         fmt::format("export {}={}; unset {}", near.name, shell_word(value), shell_word(name))});
    return;
  }
  if (std::string_view(*reader).find("build") != std::string_view::npos &&
      plan.find(name) == nullptr) {
    out.push_back({Problem::build_only, false, name, value, "",
                   fmt::format("{} is read by {}, not at run time: it changes nothing in the job",
                               name, *reader),
                   fmt::format("unset {}", name)});
    return;
  }
  lint_version(name, plan, out);
}

}  // namespace

const char* to_string(Problem problem) {
  switch (problem) {
    case Problem::missing:
      return "missing";
    case Problem::different:
      return "different";
    case Problem::must_unset:
      return "must-unset";
    case Problem::misspelt:
      return "misspelt";
    case Problem::unread:
      return "unread";
    case Problem::build_only:
      return "build-only";
  }
  return "?";
}

std::vector<LintItem> lint(const Plan& plan, const host::Env& job, const topo::Snapshot& snap) {
  std::vector<LintItem> out;
  for (const auto& s : plan.settings) lint_setting(s, job, snap, out);
  for (const auto& u : plan.unsets) {
    if (auto have = job.get(u.name)) {
      out.push_back({Problem::must_unset, true, u.name, *have, "",
                     fmt::format("{}={} must be unset: {} ({})", u.name, *have, u.why, u.fact),
                     fmt::format("unset {}", u.name)});
    }
  }
  for (const auto& [name, value] : job.all()) {
    if (plan.find(name) != nullptr || plan.unsets_name(name)) continue;
    lint_name(name, value, plan, out);
  }
  return out;
}

}  // namespace epkit::env
