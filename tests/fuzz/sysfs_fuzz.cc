// libFuzzer target for the sysfs and procfs readers: the input is cut into
// pieces that replace attribute files of a copy of examples/gke-a4 (DMI
// strings, RDMA port state, rate, link layer and GIDs, netdev attributes, PCI
// ids and NUMA node, the driver's version, params and GPU information,
// /proc/modules, /proc/mounts), then the node is probed, its plan made and
// every `epkit env` format and the snapshot's JSON written. Nothing may crash
// or throw, and no comment line of the outputs may hold a control byte
// other than a tab.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "env/facts.h"
#include "env/format.h"
#include "env/lint.h"
#include "env/plan.h"
#include "host/host.h"
#include "topo/model.h"
#include "topo/probe.h"
#include "topo/snapshot_json.h"
#include "util/json.h"

#ifndef EPKIT_FUZZ_TREE
#error "EPKIT_FUZZ_TREE: the source path of examples/gke-a4"
#endif

namespace fs = std::filesystem;

namespace {

const char* const k_files[] = {
    "/sys/class/dmi/id/sys_vendor",
    "/sys/class/dmi/id/product_name",
    "/sys/class/infiniband/mlx5_0/ports/1/state",
    "/sys/class/infiniband/mlx5_0/ports/1/rate",
    "/sys/class/infiniband/mlx5_0/ports/1/link_layer",
    "/sys/class/infiniband/mlx5_0/ports/1/phys_state",
    "/sys/class/infiniband/mlx5_0/ports/1/gids/3",
    "/sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/3",
    "/sys/class/net/eth0/operstate",
    "/sys/class/net/eth0/mtu",
    "/sys/class/net/eth0/address",
    "/sys/bus/pci/devices/0000:13:00.0/device",
    "/sys/bus/pci/devices/0000:13:00.0/numa_node",
    "/sys/bus/pci/devices/0000:13:00.0/current_link_speed",
    "/proc/driver/nvidia/version",
    "/proc/driver/nvidia/params",
    "/proc/driver/nvidia/gpus/0000:13:00.0/information",
    "/proc/modules",
    "/proc/self/mounts",
};

void check(bool ok) {
  if (!ok) std::abort();
}

struct Tree {
  std::string root;
  Tree() {
    char templ[] = "/tmp/epkit-sysfs-fuzz-XXXXXX";
    check(::mkdtemp(templ) != nullptr);
    root = templ;
    fs::copy(EPKIT_FUZZ_TREE, root, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  }
  ~Tree() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  void write(const std::string& node_path, std::string_view content) const {
    // Through links as the sysroot would see them: the file the tree holds.
    fs::path p = root + node_path;
    std::error_code ec;
    fs::path real = fs::canonical(p, ec);
    std::ofstream out(ec ? p : real, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
  }
};

// Pieces separated by a NUL byte; pieces past the file list are dropped.
std::vector<std::string_view> pieces(std::string_view text) {
  std::vector<std::string_view> out;
  while (out.size() < std::size(k_files)) {
    std::size_t end = text.find('\0');
    out.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Tree tree;
  static std::vector<std::string> originals;
  if (originals.empty()) {
    epkit::host::Sysroot fs(tree.root);
    for (const char* file : k_files) originals.push_back(fs.read(file).value_or(""));
  }
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parts = pieces(text);
  for (std::size_t i = 0; i < std::size(k_files); ++i) {
    tree.write(k_files[i], i < parts.size() ? parts[i] : std::string_view(originals[i]));
  }
  epkit::host::Host host(epkit::host::Sysroot(tree.root),
                         epkit::host::Env({{"NCCL_SOCKET_IFNAME", std::string(parts[0])}}, "fuzz"),
                         epkit::host::Libraries::none("fuzz"));
  epkit::topo::Snapshot snap = epkit::topo::probe(host);
  (void)epkit::util::dump_json(epkit::topo::to_json(snap));
  (void)epkit::util::dump_json(epkit::topo::to_json(epkit::topo::build_matrix(snap)));
  auto facts = epkit::env::read_facts(host, snap);
  for (int rank : {-1, 0}) {
    epkit::env::PlanOptions options;
    if (rank >= 0) options.local_rank = rank;
    auto plan = epkit::env::make_plan(facts, snap, options);
    if (!plan) continue;
    (void)epkit::env::lint(*plan, host.env(), snap);
    for (auto format : {epkit::env::Format::sh, epkit::env::Format::json, epkit::env::Format::k8s,
                        epkit::env::Format::mpirun, epkit::env::Format::dotenv}) {
      std::string out = epkit::env::render(*plan, format);
      if (format == epkit::env::Format::json) continue;
      // Every line that starts a comment holds no control byte.
      std::size_t pos = 0;
      while (pos < out.size()) {
        std::size_t end = out.find('\n', pos);
        if (end == std::string::npos) end = out.size();
        std::string_view line(out.data() + pos, end - pos);
        std::size_t hash = line.find_first_not_of(' ');
        if (hash != std::string_view::npos && line[hash] == '#') {
          for (unsigned char c : line) check((c >= 0x20 && c != 0x7F) || c == '\t');
        }
        pos = end + 1;
      }
    }
  }
  return 0;
}
