// The doctor checks behind `epkit logs` families (issue 28): each against a
// fixture tree that looks like the node the log came from.
#include <gtest/gtest.h>

#include "check_fixture.h"
#include "logs/catalogue.h"

namespace epkit::checks {
namespace {

using test::describe;
using test::make_snapshot;
using test::run_check;
using test::TempTree;

void write_counters(const TempTree& tree, const std::string& dev, int link_downed,
                    int symbol_error) {
  std::string base = "/sys/class/infiniband/" + dev + "/ports/1/counters/";
  tree.write(base + "link_downed", std::to_string(link_downed) + "\n");
  tree.write(base + "symbol_error", std::to_string(symbol_error) + "\n");
  tree.write(base + "port_rcv_errors", "0\n");
  tree.write(base + "link_error_recovery", "0\n");
}

TEST(LogCounterparts, PortErrorCountersSeeAFlappingLink) {
  TempTree tree;
  write_counters(tree, "mlx5_0", 0, 0);
  write_counters(tree, "mlx5_3", 4, 120);
  auto snap = make_snapshot(0, {"mlx5_0", "mlx5_3"});
  Outcome out = run_check("rdma.port-errors", tree, {}, snap);
  EXPECT_EQ(out.status, Status::warn) << describe(out);
  EXPECT_NE(out.summary.find("mlx5_3 port 1: link_downed 4"), std::string::npos) << describe(out);
  EXPECT_EQ(out.summary.find("mlx5_0"), std::string::npos) << describe(out);

  TempTree clean;
  write_counters(clean, "mlx5_0", 0, 0);
  EXPECT_EQ(run_check("rdma.port-errors", clean, {}, make_snapshot(0, {"mlx5_0"})).status,
            Status::pass);
  TempTree none;
  none.write("/sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  EXPECT_EQ(run_check("rdma.port-errors", none, {}, make_snapshot(0, {"mlx5_0"})).status,
            Status::skip);
  TempTree bad;
  bad.write("/sys/class/infiniband/mlx5_0/ports/1/counters/link_downed", "lots\n");
  EXPECT_EQ(run_check("rdma.port-errors", bad, {}, make_snapshot(0, {"mlx5_0"})).status,
            Status::unknown);
  EXPECT_EQ(run_check("rdma.port-errors", clean, {}, make_snapshot(0)).status, Status::skip);
}

TEST(LogCounterparts, FabricManagerForNvSwitches) {
  auto snap = make_snapshot(8);
  snap.nvswitches.resize(4);
  TempTree without;
  without.write("/proc/1/comm", "systemd\n");
  Outcome out = run_check("gpu.fabric-manager", without, {}, snap);
  EXPECT_EQ(out.status, Status::warn) << describe(out);
  EXPECT_TRUE(test::mentions(out, "nvidia-fabricmanager")) << describe(out);

  TempTree with;
  with.write("/proc/1/comm", "systemd\n");
  with.write("/proc/2231/comm", "nv-fabricmanager\n");
  EXPECT_EQ(run_check("gpu.fabric-manager", with, {}, snap).status, Status::pass);

  TempTree container;
  container.write("/.dockerenv", "");
  EXPECT_EQ(run_check("gpu.fabric-manager", container, {}, snap).status, Status::unknown);
  EXPECT_EQ(run_check("gpu.fabric-manager", with, {}, make_snapshot(8)).status, Status::skip);
}

// Every doctor check a log family names exists in the registry.
TEST(LogCounterparts, EveryNamedCheckExists) {
  for (std::size_t f = 0; f < logs::catalogue_families().size(); ++f) {
    std::string_view check = logs::family_spec(f).doctor_check;
    if (!check.empty()) {
      EXPECT_NE(find_check(check), nullptr) << check;
    }
  }
  for (const auto& spec : logs::rule_table()) {
    if (!spec.doctor_check.empty()) {
      EXPECT_NE(find_check(spec.doctor_check), nullptr) << spec.doctor_check;
    }
  }
}

}  // namespace
}  // namespace epkit::checks
