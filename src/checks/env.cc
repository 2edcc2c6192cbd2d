// env.* checks: variables naming paths that are not there, and NCCL_* /
// NVSHMEM_* names that no library reads (typos).
#include <fmt/format.h>

#include "checks/check.h"
#include "checks/check_util.h"
#include "env/facts.h"
#include "env/known_vars.h"
#include "env/lint.h"
#include "env/plan.h"
#include "env/shell.h"
#include "host/libsearch.h"

namespace epkit::checks {
namespace {

// What stat() says about a node path: there, missing, or not ours to see.
enum class PathState { present, missing, unreadable };

PathState path_state(const host::Sysroot& fs, std::string_view path, std::string* why) {
  auto info = fs.stat(path);
  if (info) return PathState::present;
  *why = info.error().message;
  return info.error().code == ErrorCode::not_found ? PathState::missing : PathState::unreadable;
}

// The first host::k_max_path_entries entries of a list split on `separators`.
std::vector<std::string> split_list(std::string_view value, std::string_view separators) {
  std::vector<std::string> out = host::split_any(value, separators);
  if (out.size() > host::k_max_path_entries) out.resize(host::k_max_path_entries);
  return out;
}

std::vector<std::string> split_preload(std::string_view value) {
  return split_list(value, " :\t\n");  // ld.so splits LD_PRELOAD on blanks and colons
}

void check_home(const host::Sysroot& fs, const std::string& name, const std::string& value,
                const std::string& src, Findings& f) {
  f.evidence(name, value, src);
  std::string why;
  switch (path_state(fs, value, &why)) {
    case PathState::present:
      return;
    case PathState::unreadable:
      f.add(Status::unknown, fmt::format("{}={}: {}", name, value, why));
      return;
    case PathState::missing:
      f.add(Status::fail, fmt::format("{}={} does not exist", name, value),
            fmt::format("{} naming an existing folder", name),
            fmt::format("export {}=<install folder>, or unset {}", env::shell_word(name),
                        env::shell_word(name)));
  }
}

void check_preload(const host::Host& host, const std::string& value, const std::string& src,
                   Findings& f) {
  f.evidence("LD_PRELOAD", value, src);
  std::vector<std::string> dirs = loader_dirs(host.env());
  std::string fix = "export LD_PRELOAD=<existing libraries>, or drop the entry";
  for (const auto& item : split_preload(value)) {
    if (item.find('$') != std::string::npos) continue;  // $LIB, $PLATFORM: expanded by ld.so
    if (item.find('/') != std::string::npos) {
      std::string why;
      PathState state = path_state(host.fs(), item, &why);
      if (state == PathState::missing) {
        f.add(Status::fail,
              fmt::format("LD_PRELOAD entry {} does not exist (ld.so ignores it with an "
                          "error, so the override it was meant for does not happen)",
                          item),
              "every LD_PRELOAD entry existing", fix);
      } else if (state == PathState::unreadable) {
        f.add(Status::unknown, fmt::format("LD_PRELOAD entry {}: {}", item, why));
      }
      continue;
    }
    bool found = false;
    for (const auto& dir : dirs) found = found || host.fs().exists(host::join_path(dir, item));
    if (!found) {
      // It may still be in ld.so.cache, which we do not read.
      f.add(Status::warn,
            fmt::format("LD_PRELOAD entry {} is not in LD_LIBRARY_PATH or the system library "
                        "folders",
                        item),
            "LD_PRELOAD entries the loader finds", fix);
    }
  }
}

void check_path_list(const host::Sysroot& fs, const std::string& name, const std::string& value,
                     const std::string& src, Findings& f) {
  f.evidence(name, value, src);
  for (const auto& entry : host::split_path_list(value)) {
    if (entry.front() != '/') continue;  // relative to a working directory we do not know
    std::string why;
    PathState state = path_state(fs, entry, &why);
    bool image_default = name == "LD_LIBRARY_PATH" &&
                         (entry == "/usr/local/nvidia/lib" || entry == "/usr/local/nvidia/lib64");
    if (state == PathState::missing && image_default) {
      // nvidia/cuda images list these; only some GPU runtimes mount them.
      f.add(Status::pass, fmt::format("{} (nvidia/cuda image default) is not mounted", entry));
    } else if (state == PathState::missing) {
      f.add(Status::warn, fmt::format("{} entry {} does not exist", name, entry),
            fmt::format("every {} entry existing", name),
            fmt::format("drop {} from {}", entry, name));
    } else if (state == PathState::unreadable) {
      f.add(Status::unknown, fmt::format("{} entry {}: {}", name, entry, why));
    }
  }
}

// RDMAV_DRIVERS / IBV_DRIVERS: provider names, or paths where an entry has a
// '/'. A path that is not there is libibverbs' "couldn't load driver": the
// providers then come from its own folder alone (seed 000's variable).
void check_driver_paths(const host::Sysroot& fs, const std::string& name, const std::string& value,
                        const std::string& src, Findings& f) {
  f.evidence(name, value, src);
  for (const auto& entry : split_list(value, ":; \t\n")) {
    if (entry.find('/') == std::string::npos) continue;  // a provider name, not a path
    if (entry.front() != '/') continue;  // relative to a working directory we do not know
    std::string why;
    PathState state = path_state(fs, entry, &why);
    if (state == PathState::missing) {
      f.add(Status::warn,
            fmt::format("{} entry {} does not exist: libibverbs cannot load a provider from it "
                        "(\"couldn't load driver\") and falls back to its own provider folder",
                        name, entry),
            fmt::format("every {} path existing", name),
            fmt::format("drop {} from {} (or unset {})", env::shell_word(entry), name, name));
    } else if (state == PathState::unreadable) {
      f.add(Status::unknown, fmt::format("{} entry {}: {}", name, entry, why));
    }
  }
}

Outcome check_paths(const Context& ctx) {
  const auto& env = ctx.host.env();
  const std::string src = env_source(env);
  Findings f;
  bool any = false;
  for (const auto& [name, value] : env.all()) {
    if (std::string_view(name).ends_with("_HOME") && name.size() > 5 && !value.empty() &&
        value.front() == '/') {
      any = true;
      check_home(ctx.host.fs(), name, value, src, f);
    }
  }
  if (auto preload = env.get_nonempty("LD_PRELOAD")) {
    any = true;
    check_preload(ctx.host, *preload, src, f);
  }
  for (const char* name : {"LD_LIBRARY_PATH", "PYTHONPATH"}) {
    if (auto value = env.get_nonempty(name)) {
      any = true;
      check_path_list(ctx.host.fs(), name, *value, src, f);
    }
  }
  for (const char* name : {"RDMAV_DRIVERS", "IBV_DRIVERS"}) {
    if (auto value = env.get_nonempty(name)) {
      any = true;
      check_driver_paths(ctx.host.fs(), name, *value, src, f);
    }
  }
  if (!any) {
    return f.finish(
        "no *_HOME, LD_PRELOAD, LD_LIBRARY_PATH, PYTHONPATH or RDMAV_DRIVERS/IBV_DRIVERS set");
  }
  return f.finish("every path the environment names exists");
}

using env::shell_word;

Outcome check_unknown_vars(const Context& ctx) {
  const auto& env = ctx.host.env();
  const std::string src = env_source(env);
  Findings f;
  int seen = 0;
  for (std::string_view prefix : {"NCCL_", "NVSHMEM_"}) {
    for (const auto& name : env.names_with_prefix(prefix)) {
      ++seen;
      if (env::who_reads(name)) continue;
      std::string value = env.get(name).value_or("");
      f.evidence(name, value, src);
      env::NearestName near = env::nearest_known(name);
      f.add(Status::warn,
            fmt::format("{} is not read by NCCL 2.28, NVSHMEM 3.4 or a known plugin; nearest "
                        "known name: {} (edit distance {})",
                        name, near.name, near.distance),
            fmt::format("{} spelled as the library reads it", name),
            fmt::format("export {}={}; unset {}", near.name, shell_word(value), shell_word(name)));
    }
  }
  if (seen == 0) return f.finish("no NCCL_* or NVSHMEM_* variables set");
  return f.finish(fmt::format("all {} NCCL_*/NVSHMEM_* names are known", seen));
}

// The job's NCCL/NVSHMEM/DeepEP variables against what `epkit env` derives
// for this node: the same lint() that `epkit env --check` prints as a diff.
// Misspelt names are env.unknown-vars' to report.
Outcome check_plan(const Context& ctx) {
  const auto& job = ctx.host.env();
  bool any = false;
  for (std::string_view prefix : {"NCCL_", "NVSHMEM_", "DEEP_EP_"}) {
    any = any || !job.names_with_prefix(prefix).empty();
  }
  if (!any) return skip("no NCCL_*, NVSHMEM_* or DEEP_EP_* variables set: no job environment");
  env::NodeFacts facts = env::read_facts(ctx.host, ctx.topo);
  auto plan = env::make_plan(facts, ctx.topo, {});
  if (!plan) return unknown(plan.error().message);
  Findings f;
  f.evidence("profile", env::to_string(plan->profile), plan->profile_why);
  for (const auto& item : env::lint(*plan, job, ctx.topo)) {
    if (item.problem == env::Problem::misspelt) continue;
    if (!item.have.empty()) f.evidence(item.name, item.have, env_source(job));
    if (!item.handled.empty()) {
      f.add(Status::pass, "INFO: " + item.handled);  // NCCL copes: said, not raised
      continue;
    }
    f.add(item.enforced ? Status::fail : Status::warn, item.message,
          item.want.empty() ? fmt::format("{} unset", item.name)
                            : fmt::format("{}={}", item.name, item.want),
          item.fix);
  }
  return f.finish(fmt::format("the job's variables agree with `epkit env` (profile {})",
                              env::to_string(plan->profile)));
}

constexpr Check k_checks[] = {
    {"env.paths",
     "paths named by *_HOME, LD_PRELOAD, LD_LIBRARY_PATH, PYTHONPATH, RDMAV_DRIVERS exist",
     &check_paths},
    {"env.unknown-vars", "NCCL_* and NVSHMEM_* names are ones the libraries read",
     &check_unknown_vars},
    {"env.plan", "NCCL, NVSHMEM and DeepEP variables agree with what `epkit env` derives",
     &check_plan},
};

}  // namespace

std::span<const Check> env_checks() {
  return k_checks;
}

}  // namespace epkit::checks
