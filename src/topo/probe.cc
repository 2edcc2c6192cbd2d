#include "topo/probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>

#include "host/dl/nvml.h"
#include "topo/model.h"

namespace epkit::topo {
namespace {

constexpr std::uint16_t k_vendor_nvidia = 0x10de;

// Reads through the sysroot; a failure becomes a note (its message already
// names the path) and an empty optional.
class Reader {
 public:
  Reader(const host::Sysroot& fs, std::vector<std::string>& notes) : m_fs(fs), m_notes(notes) {}

  std::optional<std::string> text(const std::string& path) const {
    return kept(m_fs.read_trimmed(path));
  }
  std::optional<std::vector<std::string>> list(const std::string& path) const {
    return kept(m_fs.list(path));
  }
  std::optional<std::string> resolve(const std::string& path) const {
    return kept(m_fs.resolve(path));
  }
  void note(std::string text) const {
    if (std::find(m_notes.begin(), m_notes.end(), text) == m_notes.end()) {
      m_notes.push_back(std::move(text));
    }
  }
  const host::Sysroot& fs() const { return m_fs; }

 private:
  template <typename T>
  std::optional<T> kept(Result<T> result) const {
    if (!result) {
      note(result.error().message);
      return std::nullopt;
    }
    return std::move(*result);
  }

  const host::Sysroot& m_fs;
  std::vector<std::string>& m_notes;
};

bool is_bdf(std::string_view s) {
  // dddd:bb:dd.f
  if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
  for (std::size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11}) {
    if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

std::vector<std::string> split(std::string_view path, char sep) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= path.size()) {
    std::size_t next = path.find(sep, pos);
    if (next == std::string_view::npos) next = path.size();
    if (next > pos) out.emplace_back(path.substr(pos, next - pos));
    pos = next + 1;
  }
  return out;
}

std::optional<long> parse_number(std::string_view text, int base) {
  if (base == 16 && text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    text.remove_prefix(2);
  }
  long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc() || end == text.data()) return std::nullopt;
  return value;
}

// A numeric sysfs attribute; unparsable content is a note too.
template <typename T>
std::optional<T> read_number(const Reader& r, const std::string& path, int base) {
  auto text = r.text(path);
  if (!text) return std::nullopt;
  auto value = parse_number(*text, base);
  if (!value) {
    r.note(fmt::format("{}: cannot parse '{}' as a number", path, *text));
    return std::nullopt;
  }
  return static_cast<T>(*value);
}

// The last PCI address in a resolved sysfs path ("/sys/devices/pci0000:00/
// 0000:00:01.0/0000:01:00.0/net/eth0" -> "0000:01:00.0").
std::optional<std::string> last_bdf(const std::string& path) {
  auto parts = split(path, '/');
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (is_bdf(*it)) return *it;
  }
  return std::nullopt;
}

// The PCI device whose resolved sysfs folder is `real`.
PciDevice read_pci_at(const Reader& r, const std::string& real) {
  PciDevice dev;
  dev.sysfs_path = real;
  std::vector<std::string> chain;
  for (const auto& part : split(real, '/')) {
    if (dev.root.empty()) {
      if (part.rfind("pci", 0) == 0 && part.find(':') != std::string::npos) dev.root = part;
      continue;
    }
    if (is_bdf(part)) chain.push_back(part);
  }
  if (dev.root.empty())
    r.note(fmt::format("{}: no pci<domain>:<bus> host bridge in the path", real));
  if (!chain.empty()) {
    dev.bdf = chain.back();
    chain.pop_back();
  } else {
    dev.bdf = std::string(host::base_name(real));
  }
  dev.bridges = std::move(chain);
  dev.vendor = read_number<std::uint16_t>(r, real + "/vendor", 16).value_or(0);
  dev.device = read_number<std::uint16_t>(r, real + "/device", 16).value_or(0);
  dev.class_code = read_number<std::uint32_t>(r, real + "/class", 16).value_or(0);
  dev.numa_node = read_number<int>(r, real + "/numa_node", 10).value_or(-1);
  dev.local_cpulist = r.text(real + "/local_cpulist").value_or("");
  // Link attributes are absent on devices without a PCIe capability (and in
  // some VMs); that is worth a note but not more.
  dev.link_speed = r.text(real + "/current_link_speed").value_or("");
  dev.link_width = read_number<int>(r, real + "/current_link_width", 10).value_or(0);
  dev.max_link_speed = r.text(real + "/max_link_speed").value_or("");
  dev.max_link_width = read_number<int>(r, real + "/max_link_width", 10).value_or(0);
  return dev;
}

struct KnownGpu {
  std::uint16_t device;
  const char* name;
};

// PCI device ids of data-centre GPUs, for trees without driver files.
constexpr KnownGpu k_known_gpus[] = {
    {0x20b0, "NVIDIA A100-SXM4-40GB"},
    {0x20b2, "NVIDIA A100-SXM4-80GB"},
    {0x20b5, "NVIDIA A100 80GB PCIe"},
    {0x2330, "NVIDIA H100 80GB HBM3"},
    {0x2331, "NVIDIA H100 PCIe"},
    {0x2324, "NVIDIA H800"},
    {0x2335, "NVIDIA H200"},
    {0x233b, "NVIDIA H200 NVL"},
    {0x2342, "NVIDIA GH200 480GB"},
    {0x2901, "NVIDIA B200"},
    {0x2941, "NVIDIA GB200"},
    {0x26b5, "NVIDIA L40"},
    {0x27b8, "NVIDIA L4"},
};

std::string field(const std::string& text, std::string_view key) {
  for (const auto& line : split(text, '\n')) {
    if (line.rfind(key, 0) != 0) continue;
    std::string value = line.substr(key.size());
    auto not_space = [](unsigned char c) { return !std::isspace(c); };
    value.erase(value.begin(), std::find_if(value.begin(), value.end(), not_space));
    value.erase(std::find_if(value.rbegin(), value.rend(), not_space).base(), value.end());
    return value;
  }
  return {};
}

void name_from_driver(const Reader& r, Gpu& gpu) {
  std::string path = fmt::format("/proc/driver/nvidia/gpus/{}/information", gpu.pci.bdf);
  auto info = r.fs().read(path);
  if (info) {
    gpu.name = field(*info, "Model:");
    gpu.uuid = field(*info, "GPU UUID:");
    if (!gpu.name.empty()) {
      gpu.name_source = path;
      return;
    }
  }
  for (const auto& known : k_known_gpus) {
    if (known.device == gpu.pci.device) {
      gpu.name = known.name;
      gpu.name_source = "pci id";
      return;
    }
  }
  gpu.name = fmt::format("NVIDIA GPU 0x{:04x}", gpu.pci.device);
  gpu.name_source = "pci id";
}

// "580.126.09" out of /proc/driver/nvidia/version's NVRM line.
std::string driver_from_proc(const host::Sysroot& fs) {
  auto text = fs.read("/proc/driver/nvidia/version");
  if (!text) return {};
  for (const auto& word : split(field(*text, "NVRM version:"), ' ')) {
    if (!word.empty() && std::isdigit(static_cast<unsigned char>(word[0])) &&
        word.find('.') != std::string::npos) {
      return word;
    }
  }
  return {};
}

void probe_pci(const Reader& r, Snapshot& snap) {
  auto names = r.list("/sys/bus/pci/devices");
  if (!names) return;
  for (const auto& name : *names) {
    std::string link = "/sys/bus/pci/devices/" + name;
    // Read vendor and class first: most devices are neither GPU nor NVSwitch.
    auto vendor = read_number<std::uint16_t>(r, link + "/vendor", 16);
    if (!vendor || *vendor != k_vendor_nvidia) continue;
    auto cls = read_number<std::uint32_t>(r, link + "/class", 16);
    if (!cls) continue;
    std::uint32_t base = *cls >> 8;
    bool gpu = base == 0x0300 || base == 0x0302;
    bool nvswitch = base == 0x0680;
    if (!gpu && !nvswitch) continue;
    auto real = r.resolve(link);
    if (!real) continue;
    PciDevice dev = read_pci_at(r, *real);
    if (gpu) {
      Gpu g;
      g.pci = std::move(dev);
      snap.gpus.push_back(std::move(g));
    } else {
      snap.nvswitches.push_back({std::move(dev)});
    }
  }
  std::sort(snap.gpus.begin(), snap.gpus.end(),
            [](const Gpu& a, const Gpu& b) { return a.pci.bdf < b.pci.bdf; });
  for (std::size_t i = 0; i < snap.gpus.size(); ++i) snap.gpus[i].index = static_cast<int>(i);
}

// Closes NVML on every path out of probe_nvml.
class NvmlSession {
 public:
  explicit NvmlSession(const host::dl::NvmlApi& api) : m_api(api) {}
  ~NvmlSession() {
    if (m_open) m_api.shutdown();
  }
  NvmlSession(const NvmlSession&) = delete;
  NvmlSession& operator=(const NvmlSession&) = delete;
  host::dl::NvmlReturn open() {
    auto rc = m_api.init();
    m_open = rc == host::dl::k_nvml_success;
    return rc;
  }

 private:
  const host::dl::NvmlApi& m_api;
  bool m_open = false;
};

std::string c_string(const char* buffer, std::size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

// Peer access as nvidia-smi topo -p2p r/w reports it. Asked here, while NVML
// is open: the check then needs no cuInit, which costs about a second on a
// node of large GPUs.
void probe_p2p(const host::dl::NvmlApi& api, Snapshot& snap) {
  if (api.device_get_p2p_status == nullptr) return;
  std::vector<host::dl::NvmlDevice> handles;
  for (const auto& gpu : snap.gpus) {
    host::dl::NvmlDevice dev = nullptr;
    if (api.device_get_handle_by_pci_bus_id(gpu.pci.bdf.c_str(), &dev) !=
        host::dl::k_nvml_success) {
      return;  // already noted above
    }
    handles.push_back(dev);
  }
  for (std::size_t a = 0; a < handles.size(); ++a) {
    std::vector<int> read(handles.size(), 0);
    std::vector<int> write(handles.size(), 0);
    for (std::size_t b = 0; b < handles.size(); ++b) {
      if (a == b) continue;
      host::dl::NvmlP2PStatus r = 0;
      host::dl::NvmlP2PStatus w = 0;
      auto rc = api.device_get_p2p_status(handles[a], handles[b], host::dl::k_nvml_p2p_read, &r);
      if (rc == host::dl::k_nvml_success) {
        rc = api.device_get_p2p_status(handles[a], handles[b], host::dl::k_nvml_p2p_write, &w);
      }
      if (rc != host::dl::k_nvml_success) {
        snap.notes.push_back(fmt::format("nvmlDeviceGetP2PStatus: {}", api.describe(rc)));
        for (auto& g : snap.gpus) g.p2p_read.reset(), g.p2p_write.reset();
        return;
      }
      read[b] = r;
      write[b] = w;
    }
    snap.gpus[a].p2p_read = std::move(read);
    snap.gpus[a].p2p_write = std::move(write);
  }
}

void probe_nvml(const host::Host& host, Snapshot& snap) {
  auto loaded =
      host.libs().nvml
          ? host.libs().nvml()
          : Result<const host::dl::NvmlApi*>(make_error(ErrorCode::unavailable, "no NVML loader"));
  if (!loaded) {
    snap.nvml = loaded.error().message;
    return;
  }
  const auto& api = **loaded;
  NvmlSession session(api);
  if (auto rc = session.open(); rc != host::dl::k_nvml_success) {
    snap.nvml = "nvmlInit_v2: " + api.describe(rc);
    return;
  }
  snap.nvml = "ok";
  char text[host::dl::k_nvml_name_size] = {};
  if (api.system_get_driver_version(text, host::dl::k_nvml_driver_version_size) ==
      host::dl::k_nvml_success) {
    snap.driver_version = c_string(text, sizeof text);
  }
  for (auto& gpu : snap.gpus) {
    host::dl::NvmlDevice dev = nullptr;
    auto rc = api.device_get_handle_by_pci_bus_id(gpu.pci.bdf.c_str(), &dev);
    if (rc != host::dl::k_nvml_success) {
      snap.notes.push_back(fmt::format("NVML has no GPU {}: {}", gpu.pci.bdf, api.describe(rc)));
      continue;
    }
    char name[host::dl::k_nvml_name_size] = {};
    if (api.device_get_name(dev, name, sizeof name) == host::dl::k_nvml_success) {
      gpu.name = c_string(name, sizeof name);
      gpu.name_source = "nvml";
    }
    char uuid[host::dl::k_nvml_uuid_size] = {};
    if (api.device_get_uuid(dev, uuid, sizeof uuid) == host::dl::k_nvml_success) {
      gpu.uuid = c_string(uuid, sizeof uuid);
    }
    std::vector<NvLink> links;
    for (unsigned link = 0; link < host::dl::k_nvml_nvlink_max_links; ++link) {
      host::dl::NvmlEnableState state = 0;
      // Links past the GPU's count answer an error: they do not exist.
      if (api.device_get_nvlink_state(dev, link, &state) != host::dl::k_nvml_success) continue;
      NvLink l;
      l.link = static_cast<int>(link);
      l.active = state == host::dl::k_nvml_feature_enabled;
      host::dl::NvmlPciInfo remote{};
      if (l.active &&
          api.device_get_nvlink_remote_pci_info(dev, link, &remote) == host::dl::k_nvml_success) {
        l.remote_bdf = host::dl::normalize_bus_id(c_string(remote.bus_id, sizeof remote.bus_id));
      }
      links.push_back(std::move(l));
    }
    gpu.nvlinks = std::move(links);
  }
  probe_p2p(api, snap);
}

// "4: ACTIVE" -> {4, "ACTIVE"}.
std::pair<int, std::string> coded(const std::string& text) {
  auto colon = text.find(':');
  if (colon == std::string::npos) return {0, text};
  std::string name = text.substr(colon + 1);
  name.erase(0, name.find_first_not_of(' '));
  return {static_cast<int>(parse_number(text.substr(0, colon), 10).value_or(0)), name};
}

bool all_zero(std::string_view gid) {
  return std::all_of(gid.begin(), gid.end(), [](char c) { return c == '0' || c == ':'; });
}

IbPort read_port(const Reader& r, const std::string& dir, int number) {
  IbPort port;
  port.port = number;
  if (auto state = r.text(dir + "/state")) std::tie(port.state_code, port.state) = coded(*state);
  if (auto phys = r.text(dir + "/phys_state")) port.phys_state = coded(*phys).second;
  port.rate = r.text(dir + "/rate").value_or("");
  port.rate_gbps = std::strtod(port.rate.c_str(), nullptr);
  port.link_layer = r.text(dir + "/link_layer").value_or("");
  auto gids = r.list(dir + "/gids");
  if (!gids) return port;
  std::vector<int> indexes;
  for (const auto& name : *gids) {
    if (auto i = parse_number(name, 10)) indexes.push_back(static_cast<int>(*i));
  }
  std::sort(indexes.begin(), indexes.end());
  for (int i : indexes) {
    auto value = r.text(fmt::format("{}/gids/{}", dir, i));
    if (!value || all_zero(*value)) continue;
    Gid gid;
    gid.index = i;
    gid.gid = *value;
    std::transform(gid.gid.begin(), gid.gid.end(), gid.gid.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    gid.ipv4_mapped = gid.gid.rfind("0000:0000:0000:0000:0000:ffff:", 0) == 0;
    gid.type = r.text(fmt::format("{}/gid_attrs/types/{}", dir, i)).value_or("");
    gid.ndev = r.text(fmt::format("{}/gid_attrs/ndevs/{}", dir, i)).value_or("");
    if (port.roce_v2_ipv4_gid < 0 && gid.ipv4_mapped && gid.type == "RoCE v2") {
      port.roce_v2_ipv4_gid = i;
    }
    port.gids.push_back(std::move(gid));
  }
  return port;
}

void probe_rdma(const Reader& r, Snapshot& snap) {
  const auto& fs = r.fs();
  if (!fs.exists("/sys/class/infiniband")) return;  // no RDMA stack: nothing to note
  auto names = r.list("/sys/class/infiniband");
  if (!names) return;
  std::map<std::string, std::string> uverbs;  // ibdev -> uverbsN
  if (fs.exists("/sys/class/infiniband_verbs")) {
    for (const auto& u :
         r.list("/sys/class/infiniband_verbs").value_or(std::vector<std::string>{})) {
      if (u.rfind("uverbs", 0) != 0) continue;
      if (auto ibdev = r.text("/sys/class/infiniband_verbs/" + u + "/ibdev")) uverbs[*ibdev] = u;
    }
  }
  for (const auto& name : *names) {
    std::string dir = "/sys/class/infiniband/" + name;
    RdmaNic nic;
    nic.name = name;
    nic.is_bond = name.find("bond") != std::string::npos;
    if (auto real = r.resolve(dir + "/device")) nic.pci = read_pci_at(r, *real);
    nic.hca_type = r.text(dir + "/hca_type").value_or("");
    nic.fw_ver = r.text(dir + "/fw_ver").value_or("");
    nic.node_guid = r.text(dir + "/node_guid").value_or("");
    if (auto it = uverbs.find(name); it != uverbs.end()) nic.uverbs = it->second;
    // device/net is absent for IB ports without IPoIB; the GID ndevs still say.
    if (fs.exists(dir + "/device/net")) {
      nic.netdevs = r.list(dir + "/device/net").value_or(std::vector<std::string>{});
    }
    if (auto ports = r.list(dir + "/ports")) {
      for (const auto& p : *ports) {
        auto number = parse_number(p, 10);
        if (!number) continue;
        nic.ports.push_back(read_port(r, dir + "/ports/" + p, static_cast<int>(*number)));
      }
    }
    for (const auto& port : nic.ports) {
      for (const auto& gid : port.gids) {
        if (!gid.ndev.empty() &&
            std::find(nic.netdevs.begin(), nic.netdevs.end(), gid.ndev) == nic.netdevs.end()) {
          nic.netdevs.push_back(gid.ndev);
        }
      }
    }
    snap.nics.push_back(std::move(nic));
  }
  std::sort(snap.nics.begin(), snap.nics.end(),
            [](const RdmaNic& a, const RdmaNic& b) { return natural_less(a.name, b.name); });
}

void probe_netdevs(const Reader& r, Snapshot& snap) {
  auto names = r.list("/sys/class/net");
  if (!names) return;
  for (const auto& name : *names) {
    std::string dir = "/sys/class/net/" + name;
    NetDev dev;
    dev.name = name;
    if (auto real = r.resolve(dir)) {
      dev.is_virtual = real->rfind("/sys/devices/virtual/", 0) == 0;
      if (!dev.is_virtual) dev.pci_bdf = last_bdf(*real);
    }
    dev.operstate = r.text(dir + "/operstate").value_or("");
    dev.mac = r.text(dir + "/address").value_or("");
    dev.mtu = read_number<int>(r, dir + "/mtu", 10).value_or(0);
    snap.netdevs.push_back(std::move(dev));
  }
}

}  // namespace

void group_switches(Snapshot& snap) {
  snap.switches.clear();
  // The switch of an endpoint is the bridge right below its root port: the
  // upstream port of the first PCIe switch on the way down (see
  // docs/topology.md). Endpoints straight under a root port have none.
  std::map<std::string, PciSwitch> by_upstream;
  for (const auto& gpu : snap.gpus) {
    if (gpu.pci.bridges.size() < 2) continue;
    auto& sw = by_upstream[gpu.pci.bridges[1]];
    sw.upstream_bdf = gpu.pci.bridges[1];
    sw.gpus.push_back(gpu.pci.bdf);
  }
  for (const auto& nic : snap.nics) {
    if (!nic.pci || nic.pci->bridges.size() < 2) continue;
    auto& sw = by_upstream[nic.pci->bridges[1]];
    sw.upstream_bdf = nic.pci->bridges[1];
    sw.nics.push_back(nic.name);
  }
  for (auto& [bdf, sw] : by_upstream) snap.switches.push_back(std::move(sw));
}

// "0-31,64-95" contains cpu?
bool cpulist_contains(std::string_view list, long cpu) {
  for (const auto& range : split(list, ',')) {
    auto dash = range.find('-');
    auto lo = parse_number(std::string_view(range).substr(0, dash), 10);
    auto hi =
        dash == std::string::npos ? lo : parse_number(std::string_view(range).substr(dash + 1), 10);
    if (lo && hi && *lo <= cpu && cpu <= *hi) return true;
  }
  return false;
}

// Some VMs report numa_node -1 for every device. nvidia-smi's NUMA affinity
// then comes from the device's local CPUs; do the same, so the matrix and the
// NUMA tie-break agree with it.
void numa_from_cpus(const Reader& r, Snapshot& snap) {
  auto nodes = r.fs().list("/sys/devices/system/node");
  if (!nodes) return;
  auto fill = [&](PciDevice& dev) {
    if (dev.numa_node >= 0 || dev.local_cpulist.empty()) return;
    auto first =
        parse_number(dev.local_cpulist.substr(0, dev.local_cpulist.find_first_of(",-")), 10);
    if (!first) return;
    for (const auto& name : *nodes) {
      if (!name.starts_with("node")) continue;
      auto id = parse_number(std::string_view(name).substr(4), 10);
      auto cpus = r.fs().read_trimmed("/sys/devices/system/node/" + name + "/cpulist");
      if (id && cpus && cpulist_contains(*cpus, *first)) {
        dev.numa_node = static_cast<int>(*id);
        return;
      }
    }
  };
  for (auto& gpu : snap.gpus) fill(gpu.pci);
  for (auto& nic : snap.nics) {
    if (nic.pci) fill(*nic.pci);
  }
}

Snapshot probe(const host::Host& host) {
  Snapshot snap;
  snap.sysroot = host.fs().is_live() ? "/" : host.fs().root();
  Reader r(host.fs(), snap.notes);
  probe_pci(r, snap);
  for (auto& gpu : snap.gpus) name_from_driver(r, gpu);
  snap.driver_version = driver_from_proc(host.fs());
  if (!snap.gpus.empty()) {
    probe_nvml(host, snap);
  } else {
    snap.nvml = "not used: no NVIDIA GPU";
  }
  probe_rdma(r, snap);
  probe_netdevs(r, snap);
  numa_from_cpus(r, snap);
  group_switches(snap);
  return snap;
}

}  // namespace epkit::topo
