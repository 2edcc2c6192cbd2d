#include "checks/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>

#include "checks/log_counterparts.h"

namespace epkit::checks {

const std::vector<Check>& registry() {
  static const std::vector<Check> all = [] {
    std::vector<Check> out;
    for (auto group : {rdma_checks(), gpu_checks(), nccl_checks(), env_checks(), nvshmem_checks(),
                       system_checks(), log_counterpart_checks()}) {
      out.insert(out.end(), group.begin(), group.end());
    }
    return out;
  }();
  return all;
}

const Check* find_check(std::string_view id) {
  for (const auto& check : registry()) {
    if (check.id == id) return &check;
  }
  return nullptr;
}

std::string_view group_of(std::string_view id) {
  return id.substr(0, id.find('.'));
}

Report run(const Context& ctx, const std::vector<std::string>& only) {
  Report report;
  report.has_gpu = !ctx.topo.gpus.empty();
  report.has_rdma = !ctx.topo.nics.empty();
  auto start = std::chrono::steady_clock::now();
  for (const auto& check : registry()) {
    if (!only.empty() && std::find(only.begin(), only.end(), check.id) == only.end()) continue;
    CheckRun item;
    item.check = &check;
    auto t0 = std::chrono::steady_clock::now();
    try {
      item.outcome = check.run(ctx);
    } catch (const std::exception& e) {
      item.outcome = unknown(fmt::format("check raised an error: {}", e.what()));
    }
    item.millis =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    report.worst = worse(report.worst, item.outcome.status);
    report.runs.push_back(std::move(item));
  }
  report.millis =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return report;
}

int exit_code(const Report& report) {
  switch (report.worst) {
    case Status::fail:
      return 2;
    case Status::warn:
      return 1;
    case Status::unknown:
      return 3;
    case Status::pass:
    case Status::skip:
      return 0;
  }
  return 3;
}

}  // namespace epkit::checks
