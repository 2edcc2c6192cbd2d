#include "checks/nic_traffic.h"

#include <gtest/gtest.h>

#include <string>

#include "checks/nic_watch.h"
#include "support/temp_tree.h"
#include "topo/probe.h"

namespace epkit::checks {
namespace {

const char* const k_a4_mapping =
    "0:mlx5_0:1,1:mlx5_1:1,2:mlx5_2:1,3:mlx5_3:1,4:mlx5_4:1,5:mlx5_5:1,6:mlx5_6:1,7:mlx5_7:1";
const char* const k_a4_hca =
    "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1";

// Seed 001's node: 8 B200 and 8 RoCE NICs (mlx5_0..7), each NIC under the
// PCIe switch of one GPU. Counters are written into the copied tree the way
// the kernel shows them (port_*_data in 4-octet units).
class A4Node : public ::testing::Test {
 protected:
  A4Node() : tree("examples/gke-a4") {}

  void set_units(int nic, std::uint64_t tx, std::uint64_t rx) const {
    std::string dir = "/sys/class/infiniband/mlx5_" + std::to_string(nic) + "/ports/1/counters/";
    tree.write(dir + "port_xmit_data", std::to_string(tx) + "\n");
    tree.write(dir + "port_rcv_data", std::to_string(rx) + "\n");
  }
  void set_all(std::uint64_t units) const {
    for (int i = 0; i < 8; ++i) set_units(i, units, units);
  }
  topo::NicCounterSnapshot read() const {
    return topo::read_nic_counters(host::Sysroot(tree.root()));
  }
  std::vector<topo::NicChoice> plan(const std::vector<int>& gpus = {0, 1, 2, 3, 4, 5, 6, 7}) const {
    return plan_for_gpus(topo::assign_nics(topo::probe(tree.host())), gpus);
  }

  test::TempTree tree;
};

const NicFinding* finding(const NicTrafficReport& r, const std::string& id) {
  for (const auto& f : r.findings) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

std::string ids(const NicTrafficReport& r) {
  std::string out;
  for (const auto& f : r.findings) out += f.id + ": " + f.outcome.summary + "\n";
  return out;
}

// 67 GB each way over mlx5_0 (ten seconds at seed 001's 6.7 GB/s), a few
// kilobytes of background on the others.
constexpr std::uint64_t k_run_units = 67'000'000'000ull / 4;
constexpr std::uint64_t k_base = 1'000'000;

TEST_F(A4Node, Seed001AllGpusOnOneNicIsSingleNic) {
  set_all(k_base);
  auto before = read();
  set_all(k_base + 1000);
  set_units(0, k_base + k_run_units, k_base + k_run_units);
  auto r = check_nic_traffic(plan(), before, read());
  ASSERT_EQ(r.findings.size(), 1u) << ids(r);
  const auto* f = finding(r, "nic.single-nic");
  ASSERT_NE(f, nullptr) << ids(r);
  EXPECT_EQ(r.worst, Status::warn);
  const auto& o = f->outcome;
  EXPECT_EQ(o.status, Status::warn);
  EXPECT_NE(o.summary.find("mlx5_0:1 carried 100% of the 134.00 GB"), std::string::npos)
      << o.summary;
  EXPECT_NE(o.summary.find("spreads 8 GPUs over 8 NICs"), std::string::npos) << o.summary;
  EXPECT_NE(o.summary.find("GPU1 mlx5_1:1"), std::string::npos) << o.summary;
  EXPECT_NE(o.summary.find("GPU7 mlx5_7:1"), std::string::npos) << o.summary;
  EXPECT_EQ(o.summary.find("GPU0 mlx5_0:1"), std::string::npos) << "GPU0 is where it should be";
  EXPECT_NE(o.expected.find("about 12% of the bytes on mlx5_0:1"), std::string::npos) << o.expected;
  EXPECT_NE(o.fix.find(std::string("DEEP_EP_DEVICE_TO_HCA_MAPPING=") + k_a4_mapping),
            std::string::npos)
      << o.fix;
  EXPECT_NE(o.fix.find(std::string("NCCL_IB_HCA=") + k_a4_hca), std::string::npos) << o.fix;
  EXPECT_NE(o.fix.find("GPU3 =mlx5_3:1"), std::string::npos) << o.fix;
  ASSERT_EQ(o.evidence.size(), 8u);
  EXPECT_EQ(o.evidence[0].key, "mlx5_0:1");
  EXPECT_EQ(o.evidence[0].source, "/sys/class/infiniband/mlx5_0/ports/1/counters/port_xmit_data");
  EXPECT_NE(o.evidence[0].value.find("134.00 GB (100%"), std::string::npos) << o.evidence[0].value;
}

TEST_F(A4Node, BalancedRunHasNoFinding) {
  set_all(k_base);
  auto before = read();
  for (int i = 0; i < 8; ++i) {
    set_units(i, k_base + k_run_units / 8 + 1000 * i, k_base + k_run_units / 8);
  }
  auto r = check_nic_traffic(plan(), before, read());
  EXPECT_TRUE(r.findings.empty()) << ids(r);
  EXPECT_EQ(r.worst, Status::pass);
  EXPECT_EQ(r.planned.size(), 8u);
}

TEST_F(A4Node, NoCountersOnTheNodeIsCountersUnknown) {
  // The example tree has neither port counters nor interface statistics.
  auto r = check_nic_traffic(plan(), read(), read());
  ASSERT_EQ(r.findings.size(), 1u) << ids(r);
  const auto* f = finding(r, "nic.counters-unknown");
  ASSERT_NE(f, nullptr) << ids(r);
  EXPECT_EQ(f->outcome.status, Status::unknown);
  EXPECT_NE(f->outcome.summary.find("no readable NIC counter for the 8 planned NICs"),
            std::string::npos)
      << f->outcome.summary;
  ASSERT_EQ(f->outcome.evidence.size(), 8u);
  EXPECT_NE(f->outcome.evidence[0].value.find("port_xmit_data"), std::string::npos);
}

TEST(NicTrafficCheck, NodeWithoutRdmaDevicesSaysWhy) {
  topo::NicChoice c;
  c.gpu = 0;
  c.nic = "mlx5_0";
  topo::NicCounterSnapshot none;
  none.note = "no /sys/class/infiniband on this node (no RDMA device)";
  auto r = check_nic_traffic({c}, none, none);
  const auto* f = finding(r, "nic.counters-unknown");
  ASSERT_NE(f, nullptr) << ids(r);
  ASSERT_EQ(f->outcome.evidence.size(), 2u);
  EXPECT_EQ(f->outcome.evidence[1].value, none.note);
}

TEST(NicTrafficCheck, NoPlannedNicIsSkip) {
  topo::NicChoice c;  // a GPU without a NIC
  auto r = check_nic_traffic({c}, {}, {});
  ASSERT_NE(finding(r, "nic.no-plan"), nullptr) << ids(r);
  EXPECT_EQ(r.worst, Status::pass);  // skip counts as pass
}

TEST_F(A4Node, TooLittleTrafficIsNotJudged) {
  set_all(k_base);
  auto before = read();
  set_units(0, k_base + 1'000'000, k_base + 1'000'000);  // 8 MB on one NIC only
  auto r = check_nic_traffic(plan(), before, read());
  ASSERT_EQ(r.findings.size(), 1u) << ids(r);
  const auto* f = finding(r, "nic.little-traffic");
  ASSERT_NE(f, nullptr) << ids(r);
  EXPECT_EQ(f->outcome.status, Status::skip);
  EXPECT_NE(f->outcome.summary.find("0.01 GB, under the 0.27 GB needed to judge"),
            std::string::npos)
      << f->outcome.summary;
}

TEST_F(A4Node, IdlePlannedNicIsUnused) {
  set_all(k_base);
  auto before = read();
  for (int i = 0; i < 8; ++i) {
    if (i != 3) set_units(i, k_base + k_run_units / 7, k_base + k_run_units / 7);
  }
  auto r = check_nic_traffic(plan(), before, read());
  ASSERT_EQ(r.findings.size(), 1u) << ids(r);
  const auto* f = finding(r, "nic.unused");
  ASSERT_NE(f, nullptr) << ids(r);
  EXPECT_EQ(f->outcome.status, Status::warn);
  EXPECT_NE(f->outcome.summary.find("1 of 8 planned NICs"), std::string::npos)
      << f->outcome.summary;
  EXPECT_NE(f->outcome.summary.find("mlx5_3:1 (0.00 GB, planned for GPU3)"), std::string::npos)
      << f->outcome.summary;
  EXPECT_NE(f->outcome.fix.find(k_a4_mapping), std::string::npos);
}

TEST_F(A4Node, CounterResetDuringTheRunIsLeftOutAndSaid) {
  set_all(k_base);
  auto before = read();
  for (int i = 0; i < 8; ++i) set_units(i, k_base + k_run_units / 8, k_base + k_run_units / 8);
  set_units(2, 10, 10);  // reset (driver reload, counter clear)
  auto r = check_nic_traffic(plan(), before, read());
  ASSERT_EQ(r.findings.size(), 1u) << ids(r);
  const auto* f = finding(r, "nic.counters-unknown");
  ASSERT_NE(f, nullptr) << ids(r);
  EXPECT_EQ(f->outcome.summary, "counters of mlx5_2:1 unknown: left out of the check");
  ASSERT_EQ(f->outcome.evidence.size(), 1u);
  EXPECT_NE(f->outcome.evidence[0].value.find("went backwards"), std::string::npos)
      << f->outcome.evidence[0].value;
}

TEST_F(A4Node, ResetCounterDoesNotHideAnIdleNic) {
  set_all(k_base);
  auto before = read();
  for (int i = 0; i < 8; ++i) set_units(i, k_base + k_run_units / 6, k_base + k_run_units / 6);
  set_units(2, 10, 10);
  set_units(5, k_base, k_base);
  auto r = check_nic_traffic(plan(), before, read());
  EXPECT_NE(finding(r, "nic.counters-unknown"), nullptr) << ids(r);
  const auto* f = finding(r, "nic.unused");
  ASSERT_NE(f, nullptr) << ids(r);
  EXPECT_NE(f->outcome.summary.find("1 of 7 planned NICs"), std::string::npos)
      << f->outcome.summary;
}

TEST_F(A4Node, NetdevFallbackStillFindsTheSingleNic) {
  // No port counters (the example has none): the interfaces' statistics.
  auto set_netdev = [&](const std::string& eth, std::uint64_t bytes) {
    tree.write("/sys/class/net/" + eth + "/statistics/tx_bytes", std::to_string(bytes) + "\n");
    tree.write("/sys/class/net/" + eth + "/statistics/rx_bytes", std::to_string(bytes) + "\n");
  };
  // mlx5_0..7 are eth2..eth9 in the A4 tree.
  for (int i = 0; i < 8; ++i) set_netdev("eth" + std::to_string(i + 2), 5000);
  auto before = read();
  for (int i = 0; i < 8; ++i) set_netdev("eth" + std::to_string(i + 2), 9000);
  set_netdev("eth2", 40'000'000'000ull);
  auto r = check_nic_traffic(plan(), before, read());
  const auto* f = finding(r, "nic.single-nic");
  ASSERT_NE(f, nullptr) << ids(r);
  EXPECT_EQ(f->outcome.evidence[0].source, "/sys/class/net/eth2/statistics/tx_bytes");
  EXPECT_EQ(r.traffic[0].source, topo::CounterSource::netdev);
}

TEST_F(A4Node, NetdevCountedNicIsNotComparedWithPortCounters) {
  set_all(k_base);
  tree.remove("/sys/class/infiniband/mlx5_6/ports/1/counters");
  tree.write("/sys/class/net/eth8/statistics/tx_bytes", "0\n");
  tree.write("/sys/class/net/eth8/statistics/rx_bytes", "0\n");
  auto before = read();
  for (int i = 0; i < 8; ++i) set_units(i, k_base + k_run_units / 8, k_base + k_run_units / 8);
  tree.remove("/sys/class/infiniband/mlx5_6/ports/1/counters");
  auto r = check_nic_traffic(plan(), before, read());
  ASSERT_EQ(r.findings.size(), 1u) << ids(r);
  const auto* f = finding(r, "nic.counters-unknown");
  ASSERT_NE(f, nullptr) << ids(r);
  EXPECT_NE(f->outcome.evidence[0].value.find("counted by eth8"), std::string::npos);
}

TEST_F(A4Node, TwoLocalGpusOnOneNicNamesTheOther) {
  set_all(k_base);
  auto before = read();
  set_units(0, k_base + k_run_units, k_base + k_run_units);
  auto r = check_nic_traffic(plan({0, 1, 1}), before, read());
  const auto* f = finding(r, "nic.single-nic");
  ASSERT_NE(f, nullptr) << ids(r);
  EXPECT_NE(f->outcome.summary.find("spreads 2 GPUs over 2 NICs"), std::string::npos)
      << f->outcome.summary;
  EXPECT_NE(f->outcome.summary.find("(GPU1 mlx5_1:1)"), std::string::npos) << f->outcome.summary;
}

TEST_F(A4Node, TrafficOnNicsOutsideThePlanIsOffPlan) {
  set_all(k_base);
  auto before = read();
  set_units(6, k_base + k_run_units, k_base + k_run_units);
  auto r = check_nic_traffic(plan({0, 1}), before, read());
  ASSERT_EQ(r.findings.size(), 1u) << ids(r);
  const auto* f = finding(r, "nic.off-plan");
  ASSERT_NE(f, nullptr) << ids(r);
  EXPECT_NE(f->outcome.summary.find("NICs the plan does not use moved 134.00 GB"),
            std::string::npos)
      << f->outcome.summary;
  EXPECT_EQ(f->outcome.evidence[0].key, "mlx5_6:1");
}

TEST(NicTrafficCheck, UnevenPlanIsJudgedByItsOwnShares) {
  // Three GPUs planned on mlx5_0, one on mlx5_1: 75% on mlx5_0 is the plan.
  std::vector<topo::NicChoice> plan;
  for (int g = 0; g < 4; ++g) {
    topo::NicChoice c;
    c.gpu = g;
    c.nic = g < 3 ? "mlx5_0" : "mlx5_1";
    plan.push_back(c);
  }
  auto counter = [](std::string nic, std::uint64_t bytes) {
    topo::NicCounter c;
    c.nic = std::move(nic);
    c.source = topo::CounterSource::rdma_port;
    c.tx_bytes = bytes;
    c.rx_bytes = 0;
    return c;
  };
  topo::NicCounterSnapshot before{{counter("mlx5_0", 0), counter("mlx5_1", 0)}, ""};
  topo::NicCounterSnapshot after{
      {counter("mlx5_0", 8'500'000'000), counter("mlx5_1", 1'500'000'000)}, ""};
  auto r = check_nic_traffic(plan, before, after);
  EXPECT_TRUE(r.findings.empty()) << ids(r);
  ASSERT_EQ(r.planned.size(), 2u);
  EXPECT_EQ(r.planned[0].gpus, (std::vector<int>{0, 1, 2}));
}

// --- NicWatch: the lines a run prints ----------------------------------------

TEST_F(A4Node, WatchPrintsTheMapAndFindsTheSeedFault) {
  set_all(k_base);
  NicWatch watch(host::Sysroot(tree.root()), topo::probe(tree.host()), {0, 1, 2, 3, 4, 5, 6, 7});
  auto start = watch.start();
  ASSERT_EQ(start.size(), 3u);
  EXPECT_EQ(start[0],
            "NIC map: GPU0 -> mlx5_0:1 (PIX), GPU1 -> mlx5_1:1 (PIX), GPU2 -> mlx5_2:1 (PIX), "
            "GPU3 -> mlx5_3:1 (PIX), GPU4 -> mlx5_4:1 (PIX), GPU5 -> mlx5_5:1 (PIX), GPU6 -> "
            "mlx5_6:1 (PIX), GPU7 -> mlx5_7:1 (PIX)");
  EXPECT_NE(start[1].find(std::string("NCCL_IB_HCA=") + k_a4_hca + " per node"), std::string::npos)
      << start[1];
  EXPECT_NE(start[1].find(std::string("DEEP_EP_DEVICE_TO_HCA_MAPPING=") + k_a4_mapping),
            std::string::npos)
      << start[1];
  EXPECT_NE(start[1].find("GPU5 mlx5_5:1"), std::string::npos) << start[1];
  EXPECT_EQ(start[2], "NIC counters: readable on the 8 planned NICs: checked after the run");

  set_units(0, k_base + k_run_units, k_base + k_run_units);
  auto done = watch.finish();
  ASSERT_GE(done.lines.size(), 2u);
  EXPECT_EQ(done.lines[0].rfind("NIC traffic (port counters, GB): mlx5_0:1 134.00 GB (tx 67.00, rx "
                                "67.00), mlx5_1:1 0.00 GB",
                                0),
            0u)
      << done.lines[0];
  EXPECT_EQ(done.lines[1].rfind("NIC check: WARN nic.single-nic: mlx5_0:1 carried 100%", 0), 0u)
      << done.lines[1];
  EXPECT_EQ(done.lines.back().rfind("  fix: pin each rank to its GPU's NIC", 0), 0u)
      << done.lines.back();
  EXPECT_EQ(done.report.worst, Status::warn);
}

TEST_F(A4Node, WatchOnABalancedRunSaysOk) {
  set_all(k_base);
  NicWatch watch(host::Sysroot(tree.root()), topo::probe(tree.host()), {2, 3});
  watch.start();
  set_units(2, k_base + k_run_units, k_base + k_run_units);
  set_units(3, k_base + k_run_units, k_base + k_run_units);
  auto done = watch.finish();
  ASSERT_EQ(done.lines.size(), 2u);
  EXPECT_EQ(done.lines[0],
            "NIC traffic (port counters, GB): mlx5_2:1 134.00 GB (tx 67.00, rx 67.00), mlx5_3:1 "
            "134.00 GB (tx 67.00, rx 67.00)");
  EXPECT_EQ(done.lines[1], "NIC check: OK, traffic spread over the 2 planned NICs as planned");
}

TEST_F(A4Node, WatchWithoutCountersSaysSoAtStart) {
  NicWatch watch(host::Sysroot(tree.root()), topo::probe(tree.host()), {0});
  auto start = watch.start();
  ASSERT_EQ(start.size(), 3u);
  EXPECT_EQ(start[0], "NIC map: GPU0 -> mlx5_0:1 (PIX)");
  EXPECT_EQ(start[2].rfind("NIC counters: readable on 0 of 1 planned NICs (", 0), 0u) << start[2];
  auto done = watch.finish();
  EXPECT_EQ(done.report.worst, Status::unknown);
  EXPECT_NE(done.lines[1].find("nic.counters-unknown"), std::string::npos) << done.lines[1];
}

TEST_F(A4Node, WatchFinishWithoutStartJudgesNothing) {
  set_all(k_base);
  NicWatch watch(host::Sysroot(tree.root()), topo::probe(tree.host()), {0, 1});
  auto done = watch.finish();
  const auto* f = finding(done.report, "nic.counters-unknown");
  ASSERT_NE(f, nullptr) << ids(done.report);
  EXPECT_NE(f->outcome.evidence[0].value.find("no reading before it"), std::string::npos);
}

TEST(NicWatchLines, GpuWithoutNicAndEmptyPlan) {
  topo::NicChoice none;
  none.gpu = 4;
  EXPECT_EQ(nic_map_line({none}), "NIC map: GPU4 -> none");
  EXPECT_EQ(nic_env_line({none}), "");
  EXPECT_EQ(nic_map_line({}), "NIC map: no GPU");
}

TEST_F(A4Node, GpuIndexOfCudaBusId) {
  auto snap = topo::probe(tree.host());
  ASSERT_FALSE(snap.gpus.empty());
  std::string bdf = snap.gpus[3].pci.bdf;  // "0000:xx:00.0"
  std::string upper = bdf;
  for (auto& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  EXPECT_EQ(gpu_index_of_bdf(snap, upper), 3);
  EXPECT_EQ(gpu_index_of_bdf(snap, "0000" + bdf), 3);  // NVML's 8-digit domain
  EXPECT_EQ(gpu_index_of_bdf(snap, "0000:ff:1f.7"), std::nullopt);

  auto local = gpu_indices_of_bus_ids(snap, {snap.gpus[5].pci.bdf, upper, upper});
  ASSERT_TRUE(local) << local.error().message;
  EXPECT_EQ(*local, (std::vector<int>{3, 5}));
  auto bad = gpu_indices_of_bus_ids(snap, {upper, "0000:ff:1f.7"});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("GPU 0000:ff:1f.7 is not in this node's topology (8 GPUs"),
            std::string::npos)
      << bad.error().message;
}

}  // namespace
}  // namespace epkit::checks
