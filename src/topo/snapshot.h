// TopoSnapshot: what the probe read off a node, and nothing derived.
//
// probe(Host) fills it from sysfs/procfs (through the sysroot) and NVML (live
// node only); the model (model.h) and the checks work from it alone, and it
// round-trips through JSON (`epkit topo --json`); == compares field by field
// (the round-trip test relies on it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace epkit::topo {

struct PciDevice {
  std::string bdf;           // "0000:8a:00.0"
  std::uint16_t vendor = 0;  // 0x10de
  std::uint16_t device = 0;
  std::uint32_t class_code = 0;      // 0x030200
  int numa_node = -1;                // -1: none reported
  std::string sysfs_path;            // resolved, "/sys/devices/pci0000:00/.../0000:8a:00.0"
  std::string root;                  // host bridge, "pci0000:00"
  std::vector<std::string> bridges;  // bdfs from the root port down to the parent
  std::string link_speed;            // current_link_speed, "32.0 GT/s PCIe"
  int link_width = 0;                // current_link_width
  std::string max_link_speed;
  int max_link_width = 0;
  std::string local_cpulist;  // local_cpulist, "0-55,112-167"; empty if unread

  bool operator==(const PciDevice&) const = default;
};

struct NvLink {
  int link = 0;
  bool active = false;
  std::string remote_bdf;  // peer GPU or NVSwitch, when NVML tells

  bool operator==(const NvLink&) const = default;
};

struct Gpu {
  int index = 0;  // CUDA order under CUDA_DEVICE_ORDER=PCI_BUS_ID
  PciDevice pci;
  std::string name;         // "NVIDIA H200"
  std::string uuid;         // "GPU-…"
  std::string name_source;  // "nvml", "/proc/driver/nvidia/gpus/…/information", "pci id"
  std::optional<std::vector<NvLink>> nvlinks;  // absent: NVML not available
  // NVML's peer-to-peer status to each GPU, by the peer's index (0 = OK, else
  // nvmlGpuP2PStatus_t: why not); absent: NVML not available or not asked.
  std::optional<std::vector<int>> p2p_read;
  std::optional<std::vector<int>> p2p_write;

  bool operator==(const Gpu&) const = default;
};

struct NvSwitch {
  PciDevice pci;

  bool operator==(const NvSwitch&) const = default;
};

struct Gid {
  int index = 0;
  std::string gid;   // "0000:0000:0000:0000:0000:ffff:0a00:0001"
  std::string type;  // gid_attrs/types: "RoCE v2", "IB/RoCE v1"
  std::string ndev;  // gid_attrs/ndevs
  bool ipv4_mapped = false;

  bool operator==(const Gid&) const = default;
};

struct IbPort {
  int port = 1;
  std::string state;       // "ACTIVE" (from "4: ACTIVE")
  int state_code = 0;      // 4
  std::string phys_state;  // "LinkUp"
  std::string rate;        // "400 Gb/sec (4X NDR)"
  double rate_gbps = 0;
  std::string link_layer;     // "InfiniBand" or "Ethernet"
  std::vector<Gid> gids;      // non-zero entries only
  int roce_v2_ipv4_gid = -1;  // index of the RoCE v2 IPv4-mapped GID, -1 if none

  bool operator==(const IbPort&) const = default;
};

struct RdmaNic {
  std::string name;  // "mlx5_0"
  std::optional<PciDevice> pci;
  std::vector<std::string> netdevs;  // from device/net/ or gid ndevs
  std::vector<IbPort> ports;
  std::string uverbs;  // "uverbs0" (from /sys/class/infiniband_verbs), empty if none
  std::string hca_type;
  std::string fw_ver;
  std::string node_guid;
  bool is_bond = false;  // name contains "bond" or lag master

  bool operator==(const RdmaNic&) const = default;
};

struct NetDev {
  std::string name;
  std::optional<std::string> pci_bdf;  // physical function
  std::string operstate;               // "up", "down", "unknown"
  std::string mac;
  int mtu = 0;
  bool is_virtual = false;  // under /sys/devices/virtual

  bool operator==(const NetDev&) const = default;
};

struct PciSwitch {
  std::string upstream_bdf;       // the switch's upstream port
  std::vector<std::string> gpus;  // GPU bdfs below it
  std::vector<std::string> nics;  // RDMA NIC names below it

  bool operator==(const PciSwitch&) const = default;
};

struct Snapshot {
  std::string sysroot;  // "/" for the live node
  std::vector<Gpu> gpus;
  std::vector<NvSwitch> nvswitches;
  std::vector<RdmaNic> nics;
  std::vector<NetDev> netdevs;
  std::vector<PciSwitch> switches;
  std::string nvml;                // "ok", or why NVML facts are missing
  std::string driver_version;      // /proc/driver/nvidia/version or NVML
  std::vector<std::string> notes;  // files that were missing or unreadable

  bool operator==(const Snapshot&) const = default;
};

}  // namespace epkit::topo
