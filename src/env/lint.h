// The rule set's second half: a job's environment against the node's Plan.
// Both `epkit env --check` and the doctor's env.plan check call lint(), and
// the names it judges come from the same variable table and known-name list
// (env/known_vars.h) that env.unknown-vars uses.
#pragma once

#include <string>
#include <vector>

#include "env/plan.h"
#include "host/env.h"
#include "topo/snapshot.h"

namespace epkit::env {

enum class Problem {
  missing,     // the plan sets it, the job does not
  different,   // both set it, to different values
  must_unset,  // the plan unsets it, the job sets it
  misspelt,    // NCCL_*/NVSHMEM_* name no library reads; nearest known name given
  unread,      // the library version on the node does not read it
  build_only,  // read by a build, not at run time
};

/// "missing", "different", "must-unset", "misspelt", "unread", "build-only".
const char* to_string(Problem problem);

struct LintItem {
  Problem problem;
  bool enforced = false;  // FAIL when true, else WARN (unless `handled`)
  std::string name;
  std::string have;  // the job's value ("" when unset)
  std::string want;  // the plan's value ("" for must-unset)
  std::string message;
  std::string fix;  // a shell line
  /// Why NCCL copes with this deviation from the plan (its default or the
  /// subset chosen works on this node): an INFO item, never WARN or FAIL.
  std::string handled{};
};

/// Every difference, in plan order, then the job's other names by name.
/// Device lists (NCCL_SOCKET_IFNAME, NCCL_IB_HCA) are compared by what they
/// select on the node `snap` describes, not as text. A per-rank setting is
/// judged only when the plan has a local rank, or when the job sets it.
/// FAIL (enforced) only where the setting has a known failure; a deviation
/// NCCL handles is INFO (`handled` says why): NCCL_IB_HCA unset where every
/// RDMA device with an active port is a rail, NCCL_SOCKET_IFNAME naming some
/// of the usable interfaces.
std::vector<LintItem> lint(const Plan& plan, const host::Env& job, const topo::Snapshot& snap);

}  // namespace epkit::env
