// Helpers for doctor-check tests: hand-made snapshots and running one check
// by id against a TempTree.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "checks/registry.h"
#include "support/temp_tree.h"
#include "topo/snapshot.h"

namespace epkit::test {

/// A snapshot with `gpus` GPUs, RDMA NICs with one port 1 each, and netdevs.
inline topo::Snapshot make_snapshot(int gpus, const std::vector<std::string>& nics = {},
                                    const std::vector<std::string>& netdevs = {}) {
  topo::Snapshot snap;
  for (int i = 0; i < gpus; ++i) {
    topo::Gpu gpu;
    gpu.index = i;
    gpu.pci.bdf = fmt::format("0000:{:02x}:00.0", 0x10 + i);
    snap.gpus.push_back(gpu);
  }
  for (const auto& name : nics) {
    topo::RdmaNic nic;
    nic.name = name;
    nic.ports.push_back(topo::IbPort{});
    nic.is_bond = name.find("bond") != std::string::npos;
    snap.nics.push_back(nic);
  }
  for (const auto& name : netdevs) {
    topo::NetDev dev;
    dev.name = name;
    snap.netdevs.push_back(dev);
  }
  return snap;
}

/// Runs the check `id` on `tree` with environment `vars`.
inline checks::Outcome run_check(std::string_view id, const TempTree& tree,
                                 const std::map<std::string, std::string>& vars,
                                 const topo::Snapshot& snap = {}) {
  const checks::Check* check = checks::find_check(id);
  EXPECT_NE(check, nullptr) << id;
  if (check == nullptr) return checks::unknown("no such check");
  host::Host host = tree.host(host::Env(vars, "test"));
  return check->run(checks::Context{host, snap});
}

/// The outcome as text, for assertion messages.
inline std::string describe(const checks::Outcome& out) {
  std::string text = fmt::format("{}: {}\n  expected: {}\n  fix: {}\n", to_string(out.status),
                                 out.summary, out.expected, out.fix);
  for (const auto& e : out.evidence)
    text += fmt::format("  {} = {} ({})\n", e.key, e.value, e.source);
  return text;
}

inline bool mentions(const checks::Outcome& out, std::string_view text) {
  return out.summary.find(text) != std::string::npos || out.fix.find(text) != std::string::npos;
}

}  // namespace epkit::test
