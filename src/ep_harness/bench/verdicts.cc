#include "ep_harness/bench/verdicts.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "runtime/peer_json.h"

namespace epkit::harness::detail {

Result<std::vector<bench::EpCheck>> exchange_verdicts(runtime::Store& store,
                                                      const std::string& prefix, int me, int world,
                                                      runtime::Deadline deadline,
                                                      const std::vector<std::string>& mine,
                                                      const std::vector<CheckSpec>& specs) {
  EPKIT_TRY(store.set(fmt::format("{}/{}", prefix, me), nlohmann::json(mine).dump(), deadline));
  std::vector<bench::EpCheck> checks;
  for (const auto& spec : specs) checks.push_back({spec.name, spec.what, {}, {}});
  for (int r = 0; r < world; ++r) {
    auto value = store.get(fmt::format("{}/{}", prefix, r), deadline);
    if (!value) return value.error();
    auto verdicts = runtime::peer::parse(*value);
    if (!verdicts.is_array() || verdicts.size() != specs.size()) {
      return make_error(ErrorCode::internal,
                        fmt::format("bench ep: rank {} sent malformed check results", r));
    }
    for (std::size_t i = 0; i < specs.size(); ++i) {
      if (!verdicts[i].is_string()) {
        return make_error(ErrorCode::internal,
                          fmt::format("bench ep: rank {} sent malformed check results", r));
      }
      std::string v = verdicts[i].get<std::string>();
      if (v.empty()) continue;
      auto& c = checks[i];
      if (c.failed_ranks.empty()) c.first_failure = fmt::format("rank {}: {}", r, v);
      c.failed_ranks.push_back(r);
    }
  }
  return checks;
}

}  // namespace epkit::harness::detail
