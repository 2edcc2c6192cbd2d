// Helpers shared by the checks that look at several things at once (the env,
// NCCL, NVSHMEM, container and kernel checks): folding findings into one
// Outcome, reading variables the way the libraries do, and the loaded kernel
// modules.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "checks/check.h"

namespace epkit::checks {

/// Findings of one check. The outcome takes the worst status; its summary
/// lists every finding of that status, and expected/fix collect those of every
/// WARN, FAIL or UNKNOWN finding, so one run shows every fix to apply.
class Findings {
 public:
  void add(Status status, std::string summary, std::string expected = {}, std::string fix = {});
  void evidence(std::string key, std::string value, std::string source);
  Status worst() const;
  bool empty() const { return m_items.empty(); }

  /// The outcome. With no finding it is PASS with `quiet_summary`.
  Outcome finish(std::string quiet_summary) const;

 private:
  struct Item {
    Status status;
    std::string summary;
    std::string expected;
    std::string fix;
  };
  std::vector<Item> m_items;
  std::vector<Evidence> m_evidence;
};

/// The evidence source of a variable: "env" for the process, else the env file.
std::string env_source(const host::Env& env);

std::string to_lower(std::string_view text);
bool iequals(std::string_view a, std::string_view b);

/// The folders the dynamic loader searches for a bare library name:
/// LD_LIBRARY_PATH's entries, then the system library folders (ld.so.cache,
/// which is not read, aside).
std::vector<std::string> loader_dirs(const host::Env& env);

/// NVSHMEM's reading of a boolean variable (env_defs_internal.h): set and not
/// starting with 0, n, N, f or F. An empty value counts as set, hence true.
bool nvshmem_bool(const std::optional<std::string>& value);
/// A switch as shell scripts and build systems write it: 1, y, yes, true, on.
bool truthy(std::string_view value);

/// Whether the environment asks NVSHMEM for IBGDA: NVSHMEM_IB_ENABLE_IBGDA
/// true, or NVSHMEM_REMOTE_TRANSPORT=ibgda (which on its own does not enable
/// it; nvshmem.ibgda says so).
bool ibgda_requested(const host::Env& env);

/// Text without leading and trailing blanks.
std::string trim(std::string_view text);

/// The rest of the first line of node file `path` that starts with `key`
/// ("CapEff:", "Max locked memory"), trimmed. invalid when no line does.
Result<std::string> read_keyed_line(const host::Sysroot& fs, std::string_view path,
                                    std::string_view key);

/// Names of the loaded modules in /proc/modules (first field of each line).
Result<std::set<std::string>> read_proc_modules(const host::Sysroot& fs);

/// Whether module `name` is loaded: listed in /proc/modules, or present as
/// /sys/module/<name> (built-in modules and modules /proc/modules hides).
/// `source` says which file told.
struct ModuleState {
  bool loaded = false;
  std::string source;
};
ModuleState module_state(const host::Sysroot& fs, const Result<std::set<std::string>>& modules,
                         std::string_view name);

}  // namespace epkit::checks
