// The doctor's registry: every check, in report order, and running them.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "checks/check.h"

namespace epkit::checks {

/// All checks, grouped as in the report. Ids are unique (a test asserts it).
const std::vector<Check>& registry();
/// The check with this id, or nullptr.
const Check* find_check(std::string_view id);
/// The group of a check id: the part before the first '.'.
std::string_view group_of(std::string_view id);

struct CheckRun {
  const Check* check = nullptr;
  Outcome outcome;
  double millis = 0;
};

struct Report {
  std::vector<CheckRun> runs;
  Status worst = Status::pass;  // over runs; skip counts as pass
  double millis = 0;
  bool has_gpu = false;
  bool has_rdma = false;
};

/// Runs the checks whose id is in `only` (all when empty), in registry order.
/// A check that throws becomes UNKNOWN with the exception text.
Report run(const Context& ctx, const std::vector<std::string>& only = {});

/// Nagios/NHC exit code of a report: 0 OK, 1 WARN, 2 FAIL, 3 UNKNOWN.
int exit_code(const Report& report);

}  // namespace epkit::checks
