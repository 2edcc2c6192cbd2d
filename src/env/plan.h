// The rule set's first half: from a node's facts to the environment NCCL,
// NVSHMEM and DeepEP should get there (a Plan). Each setting carries why and
// the fact it came from; what cannot be derived is listed as omitted with
// the reason, never guessed. docs/env.md writes the rules out.
#pragma once

#include <epkit/result.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "env/facts.h"
#include "env/var_table.h"
#include "topo/snapshot.h"

namespace epkit::env {

enum class Profile { automatic, gke_a4, gke_a3_ultra, ib, roce, nvlink_only };

/// "auto", "gke-a4", "gke-a3-ultra", "ib", "roce", "nvlink-only".
const char* to_string(Profile profile);
Result<Profile> parse_profile(std::string_view text);

/// enforced: a job without it is wrong on this node (FAIL); recommended: WARN.
enum class Strength { enforced, recommended };

struct Setting {
  std::string name;
  std::string value;  // empty for per-rank settings when no local rank was given
  std::string why;
  std::string fact;
  Strength strength = Strength::recommended;
  /// One value per local rank (the GPU of the same index) where a launcher
  /// must pick; empty for node-wide settings.
  std::vector<std::string> per_rank;
  /// A search path: the node's folders go first, the job's own entries may follow.
  bool path_list = false;
};

struct Unset {
  std::string name;
  std::string why;
  std::string fact;
};

struct Source {
  std::string path;
  std::string why;
};

struct Omitted {
  std::string name;
  std::string why;
};

struct Plan {
  Profile profile = Profile::automatic;
  std::string profile_why;
  std::optional<int> local_rank;
  std::string nccl_version;     // "2.28 (from /usr/lib/libnccl.so.2.28.9)" or "not found"
  std::string nvshmem_version;  // likewise
  std::optional<Version> nccl;  // the versions found, for the linter's version rule
  std::optional<Version> nvshmem;
  std::vector<Source> sources;
  std::vector<Setting> settings;
  std::vector<Unset> unsets;
  std::vector<Omitted> omitted;

  const Setting* find(std::string_view name) const;
  bool unsets_name(std::string_view name) const;
};

struct PlanOptions {
  Profile profile = Profile::automatic;
  std::optional<int> local_rank;
};

/// The plan for this node. A local rank with no GPU of that index is an
/// invalid error.
Result<Plan> make_plan(const NodeFacts& facts, const topo::Snapshot& snap,
                       const PlanOptions& options);

/// The profile `auto` picks, and why (facts named).
std::pair<Profile, std::string> choose_profile(const NodeFacts& facts, const topo::Snapshot& snap);

}  // namespace epkit::env
