// The HCA lists users give NCCL, NVSHMEM and DeepEP, parsed and resolved
// against a snapshot's RDMA NICs, so a check can say which NIC each GPU's
// process will really use.
#pragma once

#include <epkit/result.h>

#include <string>
#include <string_view>
#include <vector>

#include "topo/device_filter.h"
#include "topo/snapshot.h"

namespace epkit::topo {

/// The NICs a device filter (NCCL_IB_HCA, NVSHMEM_HCA_LIST; device_filter.h)
/// selects, as `name:port`: include lists in the list's order (each entry's
/// matches in NIC order), exclude lists and empty lists in NIC order.
/// Port: the entry's port, else the NIC's first ACTIVE port, else its first.
std::vector<std::string> resolve_hca_filter(const DeviceFilter& filter, const Snapshot& snap);

/// One DEEP_EP_DEVICE_TO_HCA_MAPPING entry: "gpu:hca:port".
struct HcaMapping {
  int gpu = 0;
  std::string hca;
  int port = 1;
};

/// "0:mlx5_0:1,1:mlx5_1:1"; an entry not of the form gpu:hca:port (numbers
/// where numbers go), or a GPU listed twice, is an invalid error naming it.
Result<std::vector<HcaMapping>> parse_device_to_hca_mapping(std::string_view value);

}  // namespace epkit::topo
