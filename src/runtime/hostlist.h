// Slurm's compressed host lists ("gpu[01-04,07],login1") and task counts
// ("4(x2),2"), expanded with bounds so a malformed or hostile value is an
// error, never a huge allocation.
#pragma once

#include <epkit/result.h>

#include <string>
#include <string_view>
#include <vector>

namespace epkit::runtime {

/// Most names one list may expand to; larger lists are rejected as malformed
/// (the largest clusters have tens of thousands of nodes).
inline constexpr std::size_t k_max_hostlist_hosts = 1 << 17;

/// "a[1-3,5],b" -> a1 a2 a3 a5 b. Zero padding is kept ("n[08-10]" -> n08 n09
/// n10); several bracket groups in one name multiply ("r[1-2]n[1-2]").
Result<std::vector<std::string>> expand_hostlist(std::string_view list);

/// SLURM_TASKS_PER_NODE / SLURM_STEP_TASKS_PER_NODE: "4(x2),2" -> 4 4 2.
Result<std::vector<int>> expand_tasks_per_node(std::string_view list);

}  // namespace epkit::runtime
