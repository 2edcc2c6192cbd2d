// TopoModel: what the snapshot means. Path types between devices (the
// legend of `nvidia-smi topo -m`), the GPU x {GPU, NIC} matrix, and the
// GPU-to-NIC assignment that DeepEP, NVSHMEM and NCCL should be given.
// Built from a Snapshot only, so it works the same on a live node, a
// sysroot and a JSON snapshot. The rules are written out in docs/topology.md.
#pragma once

#include <string>
#include <vector>

#include "topo/snapshot.h"

namespace epkit::topo {

/// Ordered nearest first: comparing two PathTypes compares distances.
enum class PathType { self, nvlink, pix, pxb, phb, node, sys };

/// "X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS".
const char* to_string(PathType type);

struct Path {
  PathType type = PathType::sys;
  int nvlinks = 0;  // for PathType::nvlink
  /// The matrix cell: "NV18" for NVLink, to_string(type) otherwise.
  std::string label() const;
};

/// PCIe path between two devices (no NVLink): X, PIX, PXB, PHB, NODE or SYS.
Path pci_path(const PciDevice& a, const PciDevice& b);

/// NVLinks joining two GPUs: links whose remote is the other GPU, or, when
/// both reach NVSwitches instead (any remote that is not a GPU, or none
/// reported), the smaller of their active link counts.
/// 0 when NVLink state is unknown or no link is active.
int nvlink_count(const Snapshot& snap, const Gpu& a, const Gpu& b);

/// GPU to GPU: NV# when an NVLink joins them, pci_path otherwise.
Path gpu_path(const Snapshot& snap, const Gpu& a, const Gpu& b);

struct Matrix {
  std::vector<std::string> names;               // "GPU0".."GPUn", "NIC0".."NICm"
  std::vector<std::vector<std::string>> cells;  // [row][column], rows = names
  std::vector<std::string> cpu_affinity;        // per row; GPU rows only (else "")
  std::vector<int> numa;                        // per row; -1 unknown
  std::vector<std::string> nic_names;           // NICi -> "mlx5_0" (legend)
  std::size_t gpu_count = 0;
};

/// Every GPU and every RDMA NIC with a PCI address, in snapshot order.
Matrix build_matrix(const Snapshot& snap);
/// The matrix as text, nvidia-smi-like, with the legend and the NIC legend.
std::string render_matrix(const Matrix& matrix);

struct NicChoice {
  int gpu = 0;  // GPU index
  std::string gpu_bdf;
  std::string nic;  // "mlx5_0"; empty when the node has no usable NIC
  int port = 1;
  PathType path = PathType::sys;
  int gid_index = -1;  // the port's RoCE v2 IPv4-mapped GID index; -1 if none
  bool port_active = false;
};

/// The NIC each GPU should use. Nearest by path type; among the nearest, the
/// NIC fewest GPUs already use, then the one fewest GPUs have among their
/// nearest, then the GPU's NUMA node, then NIC order. NICs with an ACTIVE
/// port are preferred over those without; bond devices are used only when
/// nothing else is there.
std::vector<NicChoice> assign_nics(const Snapshot& snap);

/// The NICs assign_nics chooses among (its ACTIVE and bond rules applied).
std::vector<std::string> usable_nic_names(const Snapshot& snap);

/// "0:mlx5_0:1,1:mlx5_1:1,..." (DEEP_EP_DEVICE_TO_HCA_MAPPING's value).
std::string deep_ep_mapping(const std::vector<NicChoice>& choices);
/// "=mlx5_0:1,mlx5_1:1,..." (NCCL_IB_HCA's exact-match value), NICs in first-use order.
std::string nccl_ib_hca(const std::vector<NicChoice>& choices);
/// "mlx5_0:1": the NVSHMEM_HCA_LIST value for one GPU's process.
std::string nvshmem_hca_list(const NicChoice& choice);

/// Natural order of device names: "mlx5_2" < "mlx5_10" < "mlx5_bond_0".
bool natural_less(const std::string& a, const std::string& b);

}  // namespace epkit::topo
