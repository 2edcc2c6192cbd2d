// Every rank's check verdicts through the store, so that every rank stops
// (or goes on to the timing) together: shared by both modes of `bench ep`.
#pragma once

#include <string>
#include <vector>

#include "bench/ep_bench.h"
#include "runtime/deadline.h"
#include "runtime/store.h"

namespace epkit::harness::detail {

struct CheckSpec {
  const char* name;
  const char* what;
};

/// Publishes `mine` (one verdict per spec, "" = passed) under
/// "<prefix>/<me>" and reads every rank's back into one EpCheck per spec.
Result<std::vector<bench::EpCheck>> exchange_verdicts(runtime::Store& store,
                                                      const std::string& prefix, int me, int world,
                                                      runtime::Deadline deadline,
                                                      const std::vector<std::string>& mine,
                                                      const std::vector<CheckSpec>& specs);

}  // namespace epkit::harness::detail
