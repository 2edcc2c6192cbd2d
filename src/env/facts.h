// NodeFacts: what the environment generator needs to know about a node, read
// once from the host (through its sysroot) and the probed topology. Each fact
// keeps where it came from, so every generated variable can cite it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "env/var_table.h"
#include "host/host.h"
#include "topo/snapshot.h"

namespace epkit::env {

struct FoundVersion {
  Version version;
  std::string where;  // the library file it was read from
};

struct NodeFacts {
  std::string sys_vendor;                  // /sys/class/dmi/id/sys_vendor
  std::string product_name;                // /sys/class/dmi/id/product_name
  bool gcp = false;                        // a Google Compute Engine VM
  std::string gpu_name;                    // the first GPU's name ("NVIDIA B200"), "" without GPUs
  bool gib = false;                        // /usr/local/gib present
  std::string gib_env_script;              // set_nccl_env.sh when present
  std::vector<std::string> tuner_configs;  // /usr/local/gib/configs/tuner_config*.txtpb
  std::optional<bool> peer_mapping_override;  // nullopt: params unreadable
  bool gdrdrv = false;
  std::optional<FoundVersion> nccl;
  std::optional<FoundVersion> nvshmem;
  std::string nvshmem_home;               // an install folder with lib/libnvshmem_host.so*
  std::vector<std::string> library_dirs;  // existing folders for LD_LIBRARY_PATH
  std::vector<std::string> socket_ifs;    // interfaces for NCCL_SOCKET_IFNAME
  std::string socket_ifs_why;             // which ones were left out and why
};

/// Reads the facts. Missing files leave their fact empty (the generator then
/// says it cannot derive what depends on it); nothing here fails.
NodeFacts read_facts(const host::Host& host, const topo::Snapshot& snap);

/// Whether RegistryDwords ("Key=Value;Key=Value", quotes allowed) sets
/// PeerMappingOverride to a non-zero number.
bool peer_mapping_override(std::string dwords);

}  // namespace epkit::env
