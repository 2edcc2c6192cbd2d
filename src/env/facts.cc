#include "env/facts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <sstream>

#include "env/interfaces.h"
#include "host/libsearch.h"

namespace epkit::env {
namespace {

constexpr std::string_view k_gib_root = "/usr/local/gib";

// Where NVSHMEM is installed by the packages, the pip wheel and the scripts
// in the seeds (the GKE DeepEP installer puts it in the nvidia mount).
constexpr std::string_view k_nvshmem_homes[] = {"/usr/local/nvshmem",
                                                "/opt/nvshmem",
                                                "/usr/lib/x86_64-linux-gnu/nvshmem/12",
                                                "/usr/lib/x86_64-linux-gnu/nvshmem/13",
                                                "/opt/deepep/nvshmem",
                                                "/usr/local/nvidia"};

// Library folders a GPU container may need on LD_LIBRARY_PATH: the GPU
// runtime's mount and gIB's plugin folder.
constexpr std::string_view k_library_dirs[] = {"/usr/local/nvidia/lib64", "/usr/local/gib/lib64"};

std::string trim(std::string text) {
  auto blank = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!text.empty() && blank(text.back())) text.pop_back();
  auto first = std::find_if_not(text.begin(), text.end(), blank);
  return std::string(first, text.end());
}

std::optional<FoundVersion> library_found(const host::Host& host, std::string_view soname,
                                          const std::vector<std::string>& extra_dirs) {
  std::vector<std::string> paths;
  for (const auto& m : host::find_library(host.fs(), host.env(), soname)) {
    paths.push_back(m.real_path.empty() ? m.node_path : m.real_path);
  }
  for (const auto& dir : extra_dirs) {
    auto real = host.fs().resolve(host::join_path(dir, soname));
    if (real) paths.push_back(*real);
  }
  for (const auto& path : paths) {
    auto v = parse_version(host::library_version(host::base_name(path)));
    if (v) return FoundVersion{*v, path};
  }
  return std::nullopt;
}

bool rail_netdev(const topo::Snapshot& snap, const std::string& name) {
  for (const auto& nic : snap.nics) {
    if (nic.is_bond) continue;
    if (std::find(nic.netdevs.begin(), nic.netdevs.end(), name) != nic.netdevs.end()) return true;
  }
  return false;
}

void pick_socket_ifs(const host::Host& host, const topo::Snapshot& snap, NodeFacts& f) {
  AddressBook book = read_addresses(host.fs());
  std::vector<std::string> left_out;
  for (const auto& dev : snap.netdevs) {
    std::string why = poor_interface(dev.name, book, false);
    if (why.empty() && rail_netdev(snap, dev.name)) why = "an RDMA NIC's interface";
    if (why.empty() && dev.operstate == "down") why = "down";
    for (std::string_view prefix : {"cni", "flannel", "cali", "cilium", "br-", "tunl"}) {
      if (why.empty() && std::string_view(dev.name).starts_with(prefix)) {
        why = "a container network interface";
      }
    }
    if (why.empty()) {
      f.socket_ifs.push_back(dev.name);
    } else {
      left_out.push_back(fmt::format("{} ({})", dev.name, why));
    }
  }
  std::ostringstream text;
  for (std::size_t i = 0; i < left_out.size(); ++i) text << (i ? ", " : "") << left_out[i];
  f.socket_ifs_why = text.str();
}

}  // namespace

bool peer_mapping_override(std::string dwords) {
  std::erase(dwords, '"');
  std::istringstream items(dwords);
  std::string item;
  while (std::getline(items, item, ';')) {
    auto eq = item.find('=');
    if (eq == std::string::npos) continue;
    std::string key = trim(item.substr(0, eq));
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (key != "peermappingoverride") continue;
    std::string value = trim(item.substr(eq + 1));
    char* end = nullptr;
    unsigned long number = std::strtoul(value.c_str(), &end, 0);
    if (end != value.c_str() && number != 0) return true;
  }
  return false;
}

NodeFacts read_facts(const host::Host& host, const topo::Snapshot& snap) {
  const auto& fs = host.fs();
  NodeFacts f;
  f.sys_vendor = fs.read_trimmed("/sys/class/dmi/id/sys_vendor").value_or("");
  f.product_name = fs.read_trimmed("/sys/class/dmi/id/product_name").value_or("");
  f.gcp = f.sys_vendor == "Google" || f.product_name == "Google Compute Engine";
  if (!snap.gpus.empty()) f.gpu_name = snap.gpus.front().name;

  f.gib = fs.is_dir(k_gib_root);
  if (f.gib) {
    std::string script = host::join_path(k_gib_root, "scripts/set_nccl_env.sh");
    if (fs.exists(script)) f.gib_env_script = script;
    std::string configs = host::join_path(k_gib_root, "configs");
    for (const auto& name : fs.list(configs).value_or(std::vector<std::string>{})) {
      if (name.starts_with("tuner_config") && name.ends_with(".txtpb")) {
        f.tuner_configs.push_back(host::join_path(configs, name));
      }
    }
    std::sort(f.tuner_configs.begin(), f.tuner_configs.end());
  }

  if (auto params = fs.read("/proc/driver/nvidia/params")) {
    std::istringstream lines(*params);
    std::string line;
    f.peer_mapping_override = false;
    while (std::getline(lines, line)) {
      if (line.starts_with("RegistryDwords:")) {
        f.peer_mapping_override = peer_mapping_override(line.substr(15));
      }
    }
  }
  if (auto modules = fs.read("/proc/modules")) {
    std::istringstream lines(*modules);
    std::string name, rest;
    while (lines >> name && std::getline(lines, rest)) f.gdrdrv = f.gdrdrv || name == "gdrdrv";
  }
  f.gdrdrv = f.gdrdrv || fs.is_dir("/sys/module/gdrdrv");

  for (auto home : k_nvshmem_homes) {
    std::string lib = host::join_path(home, "lib");
    if (fs.exists(host::join_path(lib, "libnvshmem_host.so.3")) ||
        fs.exists(host::join_path(lib, "libnvshmem_host.so"))) {
      f.nvshmem_home = std::string(home);
      break;
    }
  }
  for (auto dir : k_library_dirs) {
    if (fs.is_dir(dir)) f.library_dirs.emplace_back(dir);
  }
  std::vector<std::string> extra(f.library_dirs);
  if (!f.nvshmem_home.empty()) {
    std::string lib = host::join_path(f.nvshmem_home, "lib");
    if (std::find(f.library_dirs.begin(), f.library_dirs.end(), lib) == f.library_dirs.end()) {
      f.library_dirs.push_back(lib);
    }
    extra.push_back(lib);
  }
  f.nccl = library_found(host, "libnccl.so.2", extra);
  f.nvshmem = library_found(host, "libnvshmem_host.so.3", extra);
  pick_socket_ifs(host, snap, f);
  return f;
}

}  // namespace epkit::env
