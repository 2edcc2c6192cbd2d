// env.* checks: variables naming paths that are not there, and NCCL_* /
// NVSHMEM_* names that no library reads (typos).
#include <fmt/format.h>

#include "checks/check.h"
#include "checks/check_util.h"
#include "checks/known_vars.h"
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

std::vector<std::string> split_preload(std::string_view value) {
  return host::split_any(value, " :\t\n");  // ld.so splits LD_PRELOAD on blanks and colons
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
            fmt::format("export {}=<install folder>, or unset {}", name, name));
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
  if (!any) return f.finish("no *_HOME, LD_PRELOAD, LD_LIBRARY_PATH or PYTHONPATH set");
  return f.finish("every path the environment names exists");
}

// A value as a shell word: bare when it is plain, else single-quoted.
std::string shell_word(const std::string& value) {
  bool plain = !value.empty() && value.find_first_not_of(
                                     "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                     "0123456789_./:,=+-@%^") == std::string::npos;
  if (plain) return value;
  std::string out = "'";
  for (char c : value) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

Outcome check_unknown_vars(const Context& ctx) {
  const auto& env = ctx.host.env();
  const std::string src = env_source(env);
  Findings f;
  int seen = 0;
  for (std::string_view prefix : {"NCCL_", "NVSHMEM_"}) {
    for (const auto& name : env.names_with_prefix(prefix)) {
      ++seen;
      if (who_reads(name)) continue;
      std::string value = env.get(name).value_or("");
      f.evidence(name, value, src);
      NearestName near = nearest_known(name);
      f.add(Status::warn,
            fmt::format("{} is not read by NCCL 2.28, NVSHMEM 3.4 or a known plugin; nearest "
                        "known name: {} (edit distance {})",
                        name, near.name, near.distance),
            fmt::format("{} spelled as the library reads it", name),
            fmt::format("export {}={}; unset {}", near.name, shell_word(value), name));
    }
  }
  if (seen == 0) return f.finish("no NCCL_* or NVSHMEM_* variables set");
  return f.finish(fmt::format("all {} NCCL_*/NVSHMEM_* names are known", seen));
}

constexpr Check k_checks[] = {
    {"env.paths", "paths named by *_HOME, LD_PRELOAD, LD_LIBRARY_PATH, PYTHONPATH exist",
     &check_paths},
    {"env.unknown-vars", "NCCL_* and NVSHMEM_* names are ones the libraries read",
     &check_unknown_vars},
};

}  // namespace

std::span<const Check> env_checks() {
  return k_checks;
}

}  // namespace epkit::checks
