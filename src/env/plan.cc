#include "env/plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "topo/model.h"

namespace epkit::env {
namespace {

constexpr std::string_view k_topology_fact =
    "PCIe topology: each GPU's nearest NIC, NICs shared evenly (epkit topo)";

bool gke(Profile p) {
  return p == Profile::gke_a4 || p == Profile::gke_a3_ultra;
}
bool roce(Profile p) {
  return p == Profile::roce || gke(p);
}

std::string rail_link_layer(const topo::Snapshot& snap, const std::vector<std::string>& rails) {
  std::set<std::string> layers;
  for (const auto& nic : snap.nics) {
    if (std::find(rails.begin(), rails.end(), nic.name) == rails.end()) continue;
    for (const auto& port : nic.ports) layers.insert(port.link_layer);
  }
  if (layers.size() == 1) return *layers.begin();
  return layers.empty() ? "" : "mixed";
}

bool contains(std::string_view text, std::string_view word) {
  return text.find(word) != std::string_view::npos;
}

// The builder: adds settings, keeping out any name the target library
// version does not read.
class Builder {
 public:
  Builder(Plan& plan, const NodeFacts& facts) : m_plan(plan), m_facts(facts) {}

  void set(Setting s) {
    if (auto why = unread(s.name)) {
      m_plan.omitted.push_back({s.name, *why});
      return;
    }
    m_plan.settings.push_back(std::move(s));
  }
  void set(std::string name, std::string value, std::string why, std::string fact,
           Strength strength = Strength::recommended) {
    set(Setting{
        std::move(name), std::move(value), std::move(why), std::move(fact), strength, {}, false});
  }
  void omit(std::string name, std::string why) {
    m_plan.omitted.push_back({std::move(name), std::move(why)});
  }
  void unset(std::string name, std::string why, std::string fact) {
    m_plan.unsets.push_back({std::move(name), std::move(why), std::move(fact)});
  }

 private:
  // Why the library on this node does not read `name`, or nullopt.
  std::optional<std::string> unread(const std::string& name) const {
    const VarSpec* spec = find_var(name);
    if (spec == nullptr) return std::nullopt;
    const std::optional<FoundVersion>* found = nullptr;
    Version floor;
    if (spec->library == Library::nccl) {
      found = &m_facts.nccl;
      floor = k_nccl_floor;
    } else if (spec->library == Library::nvshmem) {
      found = &m_facts.nvshmem;
      floor = k_nvshmem_floor;
    } else {
      return std::nullopt;
    }
    if (found->has_value()) {
      if (reads(*spec, (*found)->version)) return std::nullopt;
      return fmt::format("{} {} does not read it (read from {})", to_string(spec->library),
                         (*found)->version.str(), spec->since.str());
    }
    // Version unknown: only names every release of the table reads.
    if (reads(*spec, floor)) return std::nullopt;
    return fmt::format("read since {} {}, and the node's {} version was not found",
                       to_string(spec->library), spec->since.str(), to_string(spec->library));
  }

  Plan& m_plan;
  const NodeFacts& m_facts;
};

std::string version_text(const std::optional<FoundVersion>& v) {
  return v ? fmt::format("{} (from {})", v->version.str(), v->where) : std::string("not found");
}

std::vector<std::string> rail_names(const std::vector<topo::NicChoice>& choices) {
  std::vector<std::string> out;
  for (const auto& c : choices) {
    if (!c.nic.empty() && std::find(out.begin(), out.end(), c.nic) == out.end()) {
      out.push_back(c.nic);
    }
  }
  return out;
}

void add_rails(Builder& b, Plan& plan, const NodeFacts& facts, const topo::Snapshot& snap,
               const std::vector<topo::NicChoice>& choices) {
  b.set("DEEP_EP_DEVICE_TO_HCA_MAPPING", topo::deep_ep_mapping(choices),
        "DeepEP: the NIC each GPU's process drives (GPU:HCA:port)", std::string(k_topology_fact),
        Strength::enforced);
  std::string hca = topo::nccl_ib_hca(choices);
  b.set("NCCL_IB_HCA", hca,
        "NCCL: the rail NICs only (no bond, storage or management NIC), exact names",
        std::string(k_topology_fact), Strength::enforced);

  Setting list{"NVSHMEM_HCA_LIST",
               "",
               "NVSHMEM: the one NIC nearest this rank's GPU",
               std::string(k_topology_fact),
               Strength::enforced,
               {},
               false};
  for (const auto& c : choices) list.per_rank.push_back(topo::nvshmem_hca_list(c));
  if (plan.local_rank) list.value = list.per_rank.at(static_cast<std::size_t>(*plan.local_rank));
  b.set(std::move(list));
  b.set("NVSHMEM_ENABLE_NIC_PE_MAPPING", "1",
        "NVSHMEM: map PEs to NICs by the list above instead of all using the first NIC",
        std::string(k_topology_fact));

  if (roce(plan.profile)) {
    std::set<int> gids;
    for (const auto& c : choices) gids.insert(c.gid_index);
    std::string fact = "GID tables (/sys/class/infiniband/*/ports/*/gids, gid_attrs/types)";
    if (gids.count(-1) != 0) {
      b.omit("NCCL_IB_GID_INDEX",
             "a rail port has no RoCE v2 IPv4-mapped GID (no IPv4 address on its interface?)");
      b.omit("NVSHMEM_IB_GID_INDEX", "as NCCL_IB_GID_INDEX");
    } else if (gids.size() == 1) {
      std::string gid = std::to_string(*gids.begin());
      b.set("NCCL_IB_GID_INDEX", gid, "NCCL: the RoCE v2 IPv4-mapped GID, the same on every rail",
            fact, Strength::enforced);
      b.set("NVSHMEM_IB_GID_INDEX", gid, "NVSHMEM: the same GID as NCCL", fact, Strength::enforced);
    } else {
      b.omit("NCCL_IB_GID_INDEX",
             "the RoCE v2 IPv4-mapped GID index differs between rails; NCCL takes one index");
      Setting nv{"NVSHMEM_IB_GID_INDEX",
                 "",
                 "NVSHMEM: the RoCE v2 IPv4-mapped GID of this rank's NIC",
                 fact,
                 Strength::enforced,
                 {},
                 false};
      for (const auto& c : choices) nv.per_rank.push_back(std::to_string(c.gid_index));
      if (plan.local_rank) nv.value = nv.per_rank.at(static_cast<std::size_t>(*plan.local_rank));
      b.set(std::move(nv));
    }
  }

  // IBGDA and its NIC handler.
  b.set("NVSHMEM_IB_ENABLE_IBGDA", "1",
        "NVSHMEM: GPU-initiated RDMA, the transport DeepEP's internode kernels use",
        fmt::format("RDMA rails present ({})", rail_link_layer(snap, rail_names(choices))));
  std::string params = "/proc/driver/nvidia/params RegistryDwords";
  if (!facts.peer_mapping_override) {
    b.omit("NVSHMEM_IBGDA_NIC_HANDLER",
           "/proc/driver/nvidia/params is unreadable: cannot tell whether the GPU handler works");
  } else if (*facts.peer_mapping_override) {
    b.set("NVSHMEM_IBGDA_NIC_HANDLER", "gpu",
          "NVSHMEM: the GPU rings the NIC doorbell itself (needs no GDRCopy)",
          params + " has PeerMappingOverride=1",
          facts.gcp ? Strength::enforced : Strength::recommended);
  } else if (facts.gcp) {
    b.omit("NVSHMEM_IBGDA_NIC_HANDLER",
           "the driver lacks PeerMappingOverride=1 and the CPU handler hangs internode dispatch on "
           "Google Cloud: add NVreg_RegistryDwords=\"PeerMappingOverride=1;\" to the nvidia module "
           "options and reload it, then use gpu");
  } else if (facts.nvshmem && facts.nvshmem->version >= Version{3, 4}) {
    b.omit("NVSHMEM_IBGDA_NIC_HANDLER",
           "left at auto: without PeerMappingOverride=1 NVSHMEM >= 3.4 falls back to "
           "CPU-assisted IBGDA by itself (PeerMappingOverride=1 in the driver options allows gpu)");
  } else if (facts.gdrdrv) {
    b.set("NVSHMEM_IBGDA_NIC_HANDLER", "cpu",
          "NVSHMEM: the proxy thread rings the doorbell through GDRCopy (no PeerMappingOverride)",
          params + " lacks PeerMappingOverride=1; gdrdrv loaded (/proc/modules)");
  } else {
    b.omit(
        "NVSHMEM_IBGDA_NIC_HANDLER",
        "no handler works as the node stands: add NVreg_RegistryDwords=\"PeerMappingOverride=1;\" "
        "to the nvidia module options (gpu handler), load gdrdrv (cpu handler), or use NVSHMEM "
        ">= 3.4 (CPU-assisted IBGDA)");
  }
  if (facts.gcp) {
    b.set("NVSHMEM_DISABLE_CUDA_VMM", "1",
          "NVSHMEM: the IBGDA setup that runs on Google Cloud allocates the heap without CUDA VMM",
          fmt::format("DMI: {} / {}", facts.sys_vendor, facts.product_name));
  }
}

void add_gib(Builder& b, Plan& plan, const NodeFacts& facts) {
  std::string fact = "gIB's shim (NCCL/NET shim) warns on any value";
  b.unset("TORCH_NCCL_USE_COMM_NONBLOCKING",
          "PyTorch: gIB expects it unset; images that set it to 0 break the gIB shim", fact);
  if (!facts.gib) {
    b.omit("NCCL_TUNER_CONFIG_PATH",
           "gIB is not installed at /usr/local/gib (GKE: mount hostPath /home/kubernetes/bin/gib); "
           "until it is, NCCL uses its own IB transport with the settings above");
    return;
  }
  if (!facts.gib_env_script.empty()) {
    plan.sources.push_back({facts.gib_env_script,
                            "gIB's own NCCL settings for this machine type (values not copied: "
                            "they follow the gIB release)"});
  } else {
    b.omit("(source set_nccl_env.sh)", "/usr/local/gib/scripts/set_nccl_env.sh is missing");
  }
  std::string want = plan.profile == Profile::gke_a4 ? "a4" : "a3u";
  std::string config;
  for (const auto& c : facts.tuner_configs) {
    if (config.empty() && contains(c, want)) config = c;
  }
  if (config.empty() && facts.tuner_configs.size() == 1) config = facts.tuner_configs.front();
  if (config.empty()) {
    b.omit("NCCL_TUNER_CONFIG_PATH", fmt::format("no tuner config for {} in /usr/local/gib/configs",
                                                 to_string(plan.profile)));
  } else {
    b.set("NCCL_TUNER_CONFIG_PATH", config,
          "gIB's tuner: without it NCCL stops with an internal error",
          "/usr/local/gib/configs (file exists)", Strength::enforced);
  }
}

}  // namespace

const char* to_string(Profile profile) {
  switch (profile) {
    case Profile::automatic:
      return "auto";
    case Profile::gke_a4:
      return "gke-a4";
    case Profile::gke_a3_ultra:
      return "gke-a3-ultra";
    case Profile::ib:
      return "ib";
    case Profile::roce:
      return "roce";
    case Profile::nvlink_only:
      return "nvlink-only";
  }
  return "?";
}

Result<Profile> parse_profile(std::string_view text) {
  for (Profile p : {Profile::automatic, Profile::gke_a4, Profile::gke_a3_ultra, Profile::ib,
                    Profile::roce, Profile::nvlink_only}) {
    if (text == to_string(p)) return p;
  }
  return make_error(ErrorCode::invalid,
                    fmt::format("unknown profile '{}' (auto, gke-a4, gke-a3-ultra, ib, roce, "
                                "nvlink-only)",
                                text));
}

const Setting* Plan::find(std::string_view name) const {
  for (const auto& s : settings) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

bool Plan::unsets_name(std::string_view name) const {
  return std::any_of(unsets.begin(), unsets.end(), [&](const Unset& u) { return u.name == name; });
}

std::pair<Profile, std::string> choose_profile(const NodeFacts& facts, const topo::Snapshot& snap) {
  // The rails are the NICs GPUs are assigned to (storage NICs are not).
  std::vector<std::string> rails = rail_names(topo::assign_nics(snap));
  std::string layer = rail_link_layer(snap, rails);
  std::string dmi = fmt::format("DMI {} / {}", facts.sys_vendor.empty() ? "?" : facts.sys_vendor,
                                facts.product_name.empty() ? "?" : facts.product_name);
  std::string gib = facts.gib ? "/usr/local/gib present" : "/usr/local/gib absent";
  if (facts.gcp && !rails.empty()) {
    if (contains(facts.gpu_name, "B200")) {
      return {Profile::gke_a4,
              fmt::format("{}, {} GPUs, {} rails, {}", dmi, facts.gpu_name, layer, gib)};
    }
    if (contains(facts.gpu_name, "H200")) {
      return {Profile::gke_a3_ultra,
              fmt::format("{}, {} GPUs, {} rails, {}", dmi, facts.gpu_name, layer, gib)};
    }
  }
  if (rails.empty()) {
    return {Profile::nvlink_only, "no RDMA NIC with a usable port (/sys/class/infiniband)"};
  }
  if (layer == "InfiniBand") {
    return {Profile::ib, fmt::format("{} rail NICs, link layer InfiniBand", rails.size())};
  }
  return {Profile::roce, fmt::format("{} rail NICs, link layer {}", rails.size(),
                                     layer.empty() ? "unknown" : layer)};
}

Result<Plan> make_plan(const NodeFacts& facts, const topo::Snapshot& snap,
                       const PlanOptions& options) {
  Plan plan;
  plan.local_rank = options.local_rank;
  if (options.local_rank &&
      (*options.local_rank < 0 || *options.local_rank >= static_cast<int>(snap.gpus.size()))) {
    return make_error(
        ErrorCode::invalid,
        fmt::format("--local-rank {}: the node has {} GPU{} (ranks 0..{})", *options.local_rank,
                    snap.gpus.size(), snap.gpus.size() == 1 ? "" : "s",
                    static_cast<int>(snap.gpus.size()) - 1));
  }
  auto [chosen, why] = choose_profile(facts, snap);
  if (options.profile == Profile::automatic) {
    plan.profile = chosen;
    plan.profile_why = "auto: " + why;
  } else {
    plan.profile = options.profile;
    plan.profile_why = fmt::format("given (auto would pick {}: {})", to_string(chosen), why);
  }
  plan.nccl_version = version_text(facts.nccl);
  plan.nvshmem_version = version_text(facts.nvshmem);
  if (facts.nccl) plan.nccl = facts.nccl->version;
  if (facts.nvshmem) plan.nvshmem = facts.nvshmem->version;
  Builder b(plan, facts);

  if (!facts.library_dirs.empty()) {
    Setting s{"LD_LIBRARY_PATH",
              fmt::format("{}", fmt::join(facts.library_dirs, ":")),
              "the GPU runtime's, gIB's and NVSHMEM's library folders that exist on the node",
              "folders found on the node",
              Strength::recommended,
              {},
              true};
    b.set(std::move(s));
  } else {
    b.omit("LD_LIBRARY_PATH", "none of the GPU runtime, gIB or NVSHMEM library folders exists");
  }
  if (!facts.nvshmem_home.empty()) {
    b.set("NVSHMEM_HOME", facts.nvshmem_home, "where NVSHMEM is installed (build scripts)",
          facts.nvshmem_home + "/lib/libnvshmem_host.so* exists");
  } else {
    b.omit("NVSHMEM_HOME",
           "no NVSHMEM install found (/usr/local/nvshmem, /opt/nvshmem, the nvidia mount); a "
           "*_HOME naming no folder misleads build scripts");
  }

  if (!facts.socket_ifs.empty()) {
    std::string fact = "/sys/class/net";
    if (!facts.socket_ifs_why.empty()) fact += "; left out: " + facts.socket_ifs_why;
    b.set("NCCL_SOCKET_IFNAME", fmt::format("={}", fmt::join(facts.socket_ifs, ",")),
          "NCCL bootstrap and socket traffic: routable interfaces only, exact names", fact);
  } else {
    b.omit("NCCL_SOCKET_IFNAME", "no routable interface found: " + facts.socket_ifs_why);
  }

  if (plan.profile == Profile::nvlink_only) {
    b.set("NVSHMEM_REMOTE_TRANSPORT", "none",
          "NVSHMEM: no remote transport to load; PEs talk over NVLink within the node",
          "profile nvlink-only");
  } else {
    std::vector<topo::NicChoice> choices = topo::assign_nics(snap);
    bool any = std::any_of(choices.begin(), choices.end(),
                           [](const topo::NicChoice& c) { return !c.nic.empty(); });
    if (choices.empty() || !any) {
      b.omit("DEEP_EP_DEVICE_TO_HCA_MAPPING", "no GPU or no usable RDMA NIC on the node");
    } else {
      add_rails(b, plan, facts, snap, choices);
    }
  }
  if (gke(plan.profile)) add_gib(b, plan, facts);
  if (plan.profile == Profile::ib) {
    b.omit("NCCL_IB_GID_INDEX", "InfiniBand: addressed by LID, no GID index to set");
  }
  return plan;
}

}  // namespace epkit::env
