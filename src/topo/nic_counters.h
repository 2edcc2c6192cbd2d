// NIC byte counters: what each RDMA NIC port has sent and received, read
// through the sysroot before and after a run, and the traffic between two
// readings. A counter that cannot be read is "unknown" with its reason, never
// 0: a zero would look like an idle NIC, which is a finding of its own.
//
// Two sources, best first:
//  - the RDMA port counters, /sys/class/infiniband/<dev>/ports/<p>/counters/
//    port_xmit_data and port_rcv_data. The kernel's ABI document
//    (Documentation/ABI/stable/sysfs-class-infiniband) defines them as the
//    number of data octets divided by 4, so bytes = value x 4. They are 64-bit
//    on HCAs with extended port counters and 32-bit otherwise; a 32-bit
//    counter does not wrap but stops at 2^32-1 (InfiniBand's PortCounters
//    saturate), so that value says "unknown" too.
//  - the port's Ethernet interface, /sys/class/net/<if>/statistics/
//    {tx,rx}_bytes, where the port counters are missing (some virtual
//    functions, soft-RoCE builds). On NICs whose RDMA traffic bypasses the
//    kernel (mlx5) these count only the kernel's own traffic, so the check
//    never compares them with port counters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "host/sysroot.h"

namespace epkit::topo {

enum class CounterSource { none, rdma_port, netdev };

/// "port counters", "netdev", "none".
const char* to_string(CounterSource source);

/// One NIC port at one moment.
struct NicCounter {
  std::string nic;  // "mlx5_0"
  int port = 1;
  CounterSource source = CounterSource::none;
  std::string netdev;  // the interface read, for CounterSource::netdev
  std::optional<std::uint64_t> tx_bytes;
  std::optional<std::uint64_t> rx_bytes;
  std::string tx_path;  // node paths read ("" when none)
  std::string rx_path;
  /// Why there is no value (both tx and rx are then absent); "" otherwise.
  std::string unknown;
};

struct NicCounterSnapshot {
  std::vector<NicCounter> ports;  // every port of every /sys/class/infiniband device
  /// Why there are no ports at all ("no /sys/class/infiniband on this node"); "" otherwise.
  std::string note;
};

/// Reads every port of every RDMA device. Never fails: what cannot be read is
/// recorded per port (or in `note`).
NicCounterSnapshot read_nic_counters(const host::Sysroot& fs);

/// One NIC port over a run: the difference of two readings.
struct NicTraffic {
  std::string nic;
  int port = 1;
  CounterSource source = CounterSource::none;
  std::string netdev;
  std::optional<std::uint64_t> tx_bytes;  // both present, or both absent with `unknown`
  std::optional<std::uint64_t> rx_bytes;
  std::string unknown;      // why not known: unreadable, went backwards, source changed, ...
  std::string source_path;  // the tx counter's path, for evidence

  bool known() const { return tx_bytes.has_value() && rx_bytes.has_value(); }
  std::uint64_t bytes() const { return tx_bytes.value_or(0) + rx_bytes.value_or(0); }
};

/// Per port, in `after`'s order: after - before. A counter that went backwards
/// (reset, or a wrap) makes the port unknown and says so.
std::vector<NicTraffic> traffic_between(const NicCounterSnapshot& before,
                                        const NicCounterSnapshot& after);

}  // namespace epkit::topo
