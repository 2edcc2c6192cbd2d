#include "topo/nic_counters.h"

#include <gtest/gtest.h>

#include "support/temp_tree.h"

namespace epkit::topo {
namespace {

// The A4 tree's first NIC: mlx5_0, port 1, Ethernet interface eth2.
constexpr const char* k_port = "/sys/class/infiniband/mlx5_0/ports/1";

const NicCounter* port_of(const NicCounterSnapshot& snap, const std::string& nic) {
  for (const auto& c : snap.ports) {
    if (c.nic == nic) return &c;
  }
  return nullptr;
}

void write_units(const test::TempTree& tree, const std::string& nic, const std::string& tx,
                 const std::string& rx) {
  std::string dir = "/sys/class/infiniband/" + nic + "/ports/1/counters/";
  tree.write(dir + "port_xmit_data", tx + "\n");
  tree.write(dir + "port_rcv_data", rx + "\n");
}

TEST(NicCounters, PortCountersCountFourOctetUnits) {
  test::TempTree tree("examples/gke-a4");
  write_units(tree, "mlx5_0", "1000", "250");
  auto snap = read_nic_counters(host::Sysroot(tree.root()));
  ASSERT_EQ(snap.ports.size(), 8u);
  EXPECT_EQ(snap.ports.front().nic, "mlx5_0");
  EXPECT_EQ(snap.ports.back().nic, "mlx5_7");
  const auto* c = port_of(snap, "mlx5_0");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->source, CounterSource::rdma_port);
  EXPECT_EQ(c->port, 1);
  EXPECT_EQ(c->tx_bytes, 4000u);
  EXPECT_EQ(c->rx_bytes, 1000u);
  EXPECT_EQ(c->tx_path, std::string(k_port) + "/counters/port_xmit_data");
  EXPECT_TRUE(c->unknown.empty()) << c->unknown;
}

TEST(NicCounters, NoRdmaClassIsANoteNotAFailure) {
  test::TempTree tree;
  tree.mkdir("/sys/class/net");
  auto snap = read_nic_counters(host::Sysroot(tree.root()));
  EXPECT_TRUE(snap.ports.empty());
  EXPECT_NE(snap.note.find("no /sys/class/infiniband"), std::string::npos) << snap.note;
}

TEST(NicCounters, MissingPortCountersFallBackToTheNetdev) {
  test::TempTree tree("examples/gke-a4");
  // The example tree has no counters folder: the port's interface is read.
  tree.write("/sys/class/net/eth2/statistics/tx_bytes", "123456\n");
  tree.write("/sys/class/net/eth2/statistics/rx_bytes", "654321\n");
  auto snap = read_nic_counters(host::Sysroot(tree.root()));
  const auto* c = port_of(snap, "mlx5_0");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->source, CounterSource::netdev);
  EXPECT_EQ(c->netdev, "eth2");
  EXPECT_EQ(c->tx_bytes, 123456u);  // bytes already, no unit
  EXPECT_EQ(c->rx_bytes, 654321u);
  EXPECT_EQ(c->tx_path, "/sys/class/net/eth2/statistics/tx_bytes");
}

TEST(NicCounters, SeveralInterfacesPickThePortsGidDevice) {
  test::TempTree tree("examples/gke-a4");
  // A second interface on the same function (an IPoIB child, a macvlan).
  tree.mkdir("/sys/class/infiniband/mlx5_0/device/net/eth2.100");
  tree.write("/sys/class/net/eth2/statistics/tx_bytes", "8\n");
  tree.write("/sys/class/net/eth2/statistics/rx_bytes", "9\n");
  auto snap = read_nic_counters(host::Sysroot(tree.root()));
  const auto* c = port_of(snap, "mlx5_0");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->netdev, "eth2") << c->unknown;
  EXPECT_EQ(c->tx_bytes, 8u);
}

TEST(NicCounters, NothingReadableIsUnknownWithBothReasons) {
  test::TempTree tree("examples/gke-a4");
  auto snap = read_nic_counters(host::Sysroot(tree.root()));
  const auto* c = port_of(snap, "mlx5_3");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->tx_bytes.has_value());
  EXPECT_FALSE(c->rx_bytes.has_value());
  EXPECT_NE(c->unknown.find("port_xmit_data"), std::string::npos) << c->unknown;
  EXPECT_NE(c->unknown.find("tx_bytes"), std::string::npos) << c->unknown;
}

TEST(NicCounters, GarbageCounterIsUnknownWithoutFallback) {
  test::TempTree tree("examples/gke-a4");
  write_units(tree, "mlx5_1", "12ab", "5");
  tree.write("/sys/class/net/eth3/statistics/tx_bytes", "1\n");
  tree.write("/sys/class/net/eth3/statistics/rx_bytes", "1\n");
  auto snap = read_nic_counters(host::Sysroot(tree.root()));
  const auto* c = port_of(snap, "mlx5_1");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->source, CounterSource::rdma_port);
  EXPECT_FALSE(c->tx_bytes.has_value());
  EXPECT_NE(c->unknown.find("'12ab' is not a counter"), std::string::npos) << c->unknown;
}

TEST(NicCounters, SaturatedThirtyTwoBitCounterIsUnknown) {
  test::TempTree tree("examples/gke-a4");
  write_units(tree, "mlx5_2", "4294967295", "17");
  auto snap = read_nic_counters(host::Sysroot(tree.root()));
  const auto* c = port_of(snap, "mlx5_2");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->tx_bytes.has_value());
  EXPECT_NE(c->unknown.find("saturated"), std::string::npos) << c->unknown;
}

NicCounter reading(std::string nic, std::uint64_t tx, std::uint64_t rx) {
  NicCounter c;
  c.nic = std::move(nic);
  c.source = CounterSource::rdma_port;
  c.tx_bytes = tx;
  c.rx_bytes = rx;
  c.tx_path = "/sys/class/infiniband/" + c.nic + "/ports/1/counters/port_xmit_data";
  c.rx_path = "/sys/class/infiniband/" + c.nic + "/ports/1/counters/port_rcv_data";
  return c;
}

TEST(NicTraffic, DifferenceOfTwoReadings) {
  NicCounterSnapshot before{{reading("mlx5_0", 100, 200), reading("mlx5_1", 5, 5)}, ""};
  NicCounterSnapshot after{{reading("mlx5_0", 1100, 2200), reading("mlx5_1", 5, 5)}, ""};
  auto t = traffic_between(before, after);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_TRUE(t[0].known());
  EXPECT_EQ(t[0].tx_bytes, 1000u);
  EXPECT_EQ(t[0].rx_bytes, 2000u);
  EXPECT_EQ(t[0].bytes(), 3000u);
  EXPECT_EQ(t[1].bytes(), 0u);
  EXPECT_TRUE(t[1].known());  // idle is known: zero, not unknown
}

TEST(NicTraffic, CounterThatWentBackwardsSaysSo) {
  NicCounterSnapshot before{{reading("mlx5_0", 5000, 200)}, ""};
  NicCounterSnapshot after{{reading("mlx5_0", 40, 300)}, ""};
  auto t = traffic_between(before, after);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_FALSE(t[0].known());
  EXPECT_NE(t[0].unknown.find("went backwards (5000 -> 40 bytes)"), std::string::npos)
      << t[0].unknown;
  EXPECT_NE(t[0].unknown.find("reset or wrapped"), std::string::npos);
}

TEST(NicTraffic, UnknownOnEitherSideOrSourceChangeIsUnknown) {
  NicCounter gone = reading("mlx5_1", 0, 0);
  gone.tx_bytes.reset();
  gone.rx_bytes.reset();
  gone.unknown = "open failed";
  NicCounter netdev = reading("mlx5_2", 10, 10);
  netdev.source = CounterSource::netdev;
  netdev.netdev = "eth4";
  NicCounterSnapshot before{{reading("mlx5_0", 1, 1), gone, reading("mlx5_2", 1, 1)}, ""};
  NicCounterSnapshot after{
      {reading("mlx5_0", 2, 2), reading("mlx5_1", 9, 9), netdev, reading("mlx5_9", 3, 3)}, ""};
  auto t = traffic_between(before, after);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_TRUE(t[0].known());
  EXPECT_EQ(t[1].unknown, "before the run: open failed");
  EXPECT_NE(t[2].unknown.find("port counters before the run and from eth4 after"),
            std::string::npos)
      << t[2].unknown;
  EXPECT_NE(t[3].unknown.find("appeared during the run"), std::string::npos);
}

}  // namespace
}  // namespace epkit::topo
