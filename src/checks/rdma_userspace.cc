// rdma.verbs-lib, rdma.provider-abi, rdma.provider-path: the verbs userspace
// (libibverbs and its providers).
//
// The userspace checks replay what ld.so and libibverbs do, from files only:
// which libibverbs.so.1 the loader picks (host/libsearch.h), the private ABI it
// defines and the provider file it will open for each device's driver (ELF
// version records, host/elf.h). They never dlopen a provider: that would load
// it into the doctor itself and mix two rdma-core releases in one process.
// docs/rdma-checks.md describes each decision.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "checks/rdma_common.h"
#include "env/shell.h"
#include "host/dl/ibverbs.h"
#include "host/elf.h"
#include "host/libsearch.h"

namespace epkit::checks::rdma {

namespace {

constexpr std::string_view k_private_prefix = "IBVERBS_PRIVATE_";
constexpr std::string_view k_verbs_config_dir = "/etc/libibverbs.d";
constexpr std::string_view k_reinstall_fix =
    "apt-get install --reinstall libibverbs1 ibverbs-providers";

// ---- libibverbs copies on the node --------------------------------------

std::optional<int> private_abi(const host::ElfInfo& info) {
  for (const auto& name : info.version_defs) {
    if (!name.starts_with(k_private_prefix)) continue;
    if (auto n = parse_integer(std::string_view(name).substr(k_private_prefix.size()))) {
      return static_cast<int>(*n);
    }
  }
  return std::nullopt;
}

// The private ABI a provider needs from libibverbs.so.1, if any.
std::optional<int> needed_abi(const host::ElfInfo& info) {
  for (const auto& name : info.needs_from(k_verbs_soname)) {
    if (!name.starts_with(k_private_prefix)) continue;
    if (auto n = parse_integer(std::string_view(name).substr(k_private_prefix.size()))) {
      return static_cast<int>(*n);
    }
  }
  return std::nullopt;
}

struct VerbsCopy {
  host::LibMatch match;  // the first search hit that names this file
  std::optional<host::ElfInfo> elf;
  std::string elf_error;
  std::optional<int> abi;
};

struct VerbsView {
  std::vector<host::LibMatch> matches;  // every hit, search order
  std::vector<VerbsCopy> copies;        // distinct real files, first hit first
  bool has_library_dirs = false;        // any search folder exists in the tree
};

VerbsView look_up_verbs(const Context& ctx) {
  const auto& fs = ctx.host.fs();
  VerbsView view;
  for (const auto& dir : host::loader_search_dirs(fs, ctx.host.env())) {
    if (fs.is_dir(dir.dir)) view.has_library_dirs = true;
  }
  view.matches = host::find_library(fs, ctx.host.env(), k_verbs_soname);
  for (const auto& match : view.matches) {
    bool seen = std::any_of(view.copies.begin(), view.copies.end(), [&](const VerbsCopy& c) {
      return c.match.real_path == match.real_path;
    });
    if (seen) continue;
    VerbsCopy copy;
    copy.match = match;
    auto elf = host::read_elf(fs, match.real_path);
    if (elf) {
      copy.abi = private_abi(*elf);
      copy.elf = std::move(*elf);
    } else {
      copy.elf_error = elf.error().message;
    }
    view.copies.push_back(std::move(copy));
  }
  return view;
}

std::string abi_text(const VerbsCopy& copy) {
  if (copy.abi) return fmt::format("{}{}", k_private_prefix, *copy.abi);
  if (!copy.elf_error.empty()) return "unreadable";
  return "no IBVERBS_PRIVATE version";
}

// Why the loader takes this match first.
std::string why_first(const host::LibMatch& match) {
  if (match.origin == "LD_LIBRARY_PATH") {
    return fmt::format("LD_LIBRARY_PATH entry {} ({}) comes before the system folders",
                       match.position, match.dir);
  }
  if (match.origin == "default") return fmt::format("{} is a default loader folder", match.dir);
  return fmt::format("{} is listed in {}", match.dir, match.origin);
}

void add_copies(Verdict& v, const VerbsView& view) {
  for (const auto& copy : view.copies) {
    v.add(copy.match.node_path,
          fmt::format("{} -> {} ({}, {})", copy.match.version, copy.match.real_path, abi_text(copy),
                      copy.match.origin),
          copy.match.real_path);
  }
}

// ---- providers ------------------------------------------------------------

// The provider a kernel driver's devices need ("mlx5_core" -> "mlx5"), as
// rdma-core names them in /etc/libibverbs.d/<name>.driver.
std::string provider_for_driver(std::string_view driver) {
  static const std::map<std::string_view, std::string_view> k_known = {
      {"mlx5_core", "mlx5"}, {"mlx4_core", "mlx4"}, {"bnxt_en", "bnxt_re"},
      {"irdma", "irdma"},    {"ice", "irdma"},      {"efa", "efa"},
      {"erdma", "erdma"},    {"mana", "mana"},      {"hns3", "hns"},
      {"qede", "qedr"},      {"cxgb4", "cxgb4"},    {"vmw_pvrdma", "vmw_pvrdma"},
      {"rdma_rxe", "rxe"},   {"siw", "siw"},        {"hfi1", "hfi1verbs"}};
  if (auto it = k_known.find(driver); it != k_known.end()) return std::string(it->second);
  std::string name(driver);
  for (std::string_view suffix : {"_core", "_en"}) {
    if (name.ends_with(suffix)) name.resize(name.size() - suffix.size());
  }
  return name;
}

struct DeviceProvider {
  std::string provider;  // "mlx5"
  std::vector<std::string> devices;
  std::string source;  // where the driver name came from
};

std::vector<DeviceProvider> device_providers(const Context& ctx, Verdict& v) {
  std::vector<DeviceProvider> out;
  for (const auto& nic : ctx.topo.nics) {
    std::string link = fmt::format("/sys/class/infiniband/{}/device/driver", nic.name);
    std::string provider;
    std::string source = link;
    if (auto target = ctx.host.fs().readlink(link)) {
      std::string driver(host::base_name(*target));
      provider = provider_for_driver(driver);
      v.add(nic.name + " driver", driver, link);
    } else {
      // Software devices (rxe, siw) have no PCI driver link: take the name's
      // prefix, "rxe0" -> "rxe".
      provider = nic.name.substr(0, nic.name.find_first_of("_0123456789"));
      source = "device name " + nic.name;
      v.add(nic.name + " driver", "no driver link; provider guessed from the name", link);
    }
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const DeviceProvider& p) { return p.provider == provider; });
    if (it == out.end()) {
      out.push_back({provider, {nic.name}, source});
    } else {
      it->devices.push_back(nic.name);
    }
  }
  return out;
}

// "driver mlx5" lines of /etc/libibverbs.d/*.driver (read as libibverbs does:
// every regular file of the folder).
std::set<std::string> configured_drivers(const Context& ctx, Verdict& v, bool& dir_exists) {
  std::set<std::string> names;
  auto files = ctx.host.fs().list(k_verbs_config_dir);
  dir_exists = files.ok();
  if (!files) return names;
  for (const auto& file : *files) {
    std::string path = host::join_path(k_verbs_config_dir, file);
    auto text = ctx.host.fs().read(path);
    if (!text) continue;
    for (const auto& line : host::split_any(*text, "\n")) {
      auto words = host::split_any(line, " \t");
      if (words.size() >= 2 && words[0] == "driver") names.insert(words[1]);
    }
  }
  v.add(std::string(k_verbs_config_dir), fmt::format("{}", fmt::join(names, " ")),
        std::string(k_verbs_config_dir));
  return names;
}

// RDMAV_DRIVERS, or IBV_DRIVERS when it is unset, split as libibverbs does.
std::vector<std::string> driver_env_entries(const Context& ctx, std::string& var) {
  for (const char* name : {"RDMAV_DRIVERS", "IBV_DRIVERS"}) {
    if (auto value = ctx.host.env().get(name)) {
      var = name;
      auto entries = host::split_any(*value, ":;");
      if (entries.size() > host::k_max_path_entries) entries.resize(host::k_max_path_entries);
      return entries;
    }
  }
  return {};
}

struct VerbsSetup {
  const VerbsCopy* winner = nullptr;
  int abi = 0;
  std::string provider_dir;
  std::string provider_dir_source;
  std::string env_var;  // "RDMAV_DRIVERS" or "IBV_DRIVERS" when set
  std::vector<std::string> env_entries;
};

// libibverbs' provider folder: compiled in (a read-only string such as
// "/usr/lib/x86_64-linux-gnu/libibverbs/lib%s-rdmav34.so" or one ending in
// "/libibverbs"), else a libibverbs folder beside the library, else the
// distribution default.
void find_provider_dir(const Context& ctx, VerbsSetup& setup) {
  const auto& fs = ctx.host.fs();
  const std::string& real = setup.winner->match.real_path;
  if (auto bytes = host::read_elf_bytes(fs, real)) {
    if (auto strings = host::elf_rodata_strings(*bytes, real, "/libibverbs")) {
      for (const auto& s : *strings) {
        if (s.empty() || s.front() != '/') continue;
        auto pos = s.find("/libibverbs/lib%s");
        if (pos == std::string::npos && s.ends_with("/libibverbs")) pos = s.size() - 11;
        if (pos == std::string::npos) continue;
        setup.provider_dir = s.substr(0, pos + 11);
        setup.provider_dir_source = fmt::format("compiled into {} (\"{}\")", real, s);
        return;
      }
    }
  }
  std::string beside = host::join_path(host::dir_name(real), "libibverbs");
  if (fs.is_dir(beside)) {
    setup.provider_dir = beside;
    setup.provider_dir_source = "folder beside " + real;
    return;
  }
  bool arm = setup.winner->elf && setup.winner->elf->machine == "aarch64";
  setup.provider_dir =
      arm ? "/usr/lib/aarch64-linux-gnu/libibverbs" : "/usr/lib/x86_64-linux-gnu/libibverbs";
  setup.provider_dir_source = "distribution default (no folder found in the library)";
}

std::string provider_file_name(std::string_view provider, int abi) {
  return fmt::format("lib{}-rdmav{}.so", provider, abi);
}

struct ProviderFile {
  std::string node_path;
  std::string real_path;
  std::string how;  // "RDMAV_DRIVERS entry 1", "provider folder", "loader search (...)"
  bool via_env = false;
};

// The file libibverbs opens for `provider`, in its order: RDMAV_DRIVERS
// entries (absolute ones get "-rdmav<N>.so" appended), the provider folder,
// then the loader's search for lib<name>-rdmav<N>.so.
std::optional<ProviderFile> locate_provider(const Context& ctx, const VerbsSetup& setup,
                                            std::string_view provider) {
  const auto& fs = ctx.host.fs();
  std::string file = provider_file_name(provider, setup.abi);
  auto regular = [&](const std::string& path) {
    auto info = fs.stat(path);
    return info && info->type == host::FileType::regular;
  };
  for (std::size_t i = 0; i < setup.env_entries.size(); ++i) {
    const auto& entry = setup.env_entries[i];
    if (entry.front() != '/' || host::base_name(entry) != "lib" + std::string(provider)) continue;
    std::string path = fmt::format("{}-rdmav{}.so", entry, setup.abi);
    if (regular(path)) {
      return ProviderFile{path, fs.resolve(path).value_or(path),
                          fmt::format("{} entry {}", setup.env_var, i + 1), true};
    }
  }
  std::string in_dir = host::join_path(setup.provider_dir, file);
  if (regular(in_dir)) {
    return ProviderFile{in_dir, fs.resolve(in_dir).value_or(in_dir), "provider folder", false};
  }
  auto found = host::find_library(fs, ctx.host.env(), file);
  if (!found.empty()) {
    const auto& m = found.front();
    return ProviderFile{m.node_path, m.real_path, fmt::format("loader search ({})", m.origin),
                        m.origin == "LD_LIBRARY_PATH"};
  }
  return std::nullopt;
}

// Folders where providers of other ABIs may lie: the provider folder, the
// folders of absolute RDMAV_DRIVERS entries, and the distribution defaults.
std::vector<std::string> provider_dirs(const VerbsSetup& setup) {
  std::vector<std::string> dirs = {setup.provider_dir};
  for (const auto& entry : setup.env_entries) {
    if (entry.front() == '/') dirs.emplace_back(host::dir_name(entry));
  }
  dirs.emplace_back("/usr/lib/x86_64-linux-gnu/libibverbs");
  dirs.emplace_back("/usr/lib/aarch64-linux-gnu/libibverbs");
  std::vector<std::string> unique;
  for (auto& d : dirs) {
    if (std::find(unique.begin(), unique.end(), d) == unique.end()) unique.push_back(std::move(d));
  }
  return unique;
}

// lib<provider>-rdmav<M>.so files with M other than the wanted ABI.
std::vector<std::string> other_abi_providers(const Context& ctx, const VerbsSetup& setup,
                                             std::string_view provider) {
  std::string prefix = fmt::format("lib{}-rdmav", provider);
  std::string wanted = provider_file_name(provider, setup.abi);
  std::vector<std::string> out;
  for (const auto& dir : provider_dirs(setup)) {
    auto names = ctx.host.fs().list(dir);
    if (!names) continue;
    for (const auto& name : *names) {
      if (name.starts_with(prefix) && name.ends_with(".so") && name != wanted) {
        out.push_back(host::join_path(dir, name));
      }
    }
  }
  return out;
}

// A copy of libibverbs that defines `abi`, to name in a fix.
const VerbsCopy* copy_with_abi(const VerbsView& view, int abi) {
  for (const auto& copy : view.copies) {
    if (copy.abi && *copy.abi == abi) return &copy;
  }
  return nullptr;
}

std::string put_first_fix(const VerbsCopy& copy) {
  return fmt::format(
      "or put the matching libibverbs first: export LD_LIBRARY_PATH={}:$LD_LIBRARY_PATH",
      env::shell_word(copy.match.dir));
}

// Shared start of the userspace checks: the winning libibverbs and its ABI.
// Returns an Outcome when the check cannot go on.
std::optional<Outcome> prepare(const Context& ctx, const VerbsView& view, VerbsSetup& setup,
                               Verdict& v) {
  if (ctx.topo.nics.empty()) return skip("no RDMA device in /sys/class/infiniband");
  if (!view.has_library_dirs) {
    return skip(
        "the tree holds none of the loader's library folders (a sysfs-only snapshot): "
        "libibverbs and its providers cannot be checked from it");
  }
  add_copies(v, view);
  if (view.copies.empty()) {
    return unknown(
        "no libibverbs.so.1 in the loader's folders, so no provider is loaded (see "
        "rdma.verbs-lib)");
  }
  setup.winner = &view.copies.front();
  if (!setup.winner->elf) {
    Outcome out = unknown(
        fmt::format("cannot read {}: {}", setup.winner->match.real_path, setup.winner->elf_error));
    out.evidence = v.finish("").evidence;
    return out;
  }
  if (!setup.winner->abi) {
    Outcome out = unknown(
        fmt::format("{} defines no IBVERBS_PRIVATE_<N> version, so its provider ABI is unknown",
                    setup.winner->match.real_path));
    out.evidence = v.finish("").evidence;
    return out;
  }
  setup.abi = *setup.winner->abi;
  find_provider_dir(ctx, setup);
  setup.env_entries = driver_env_entries(ctx, setup.env_var);
  v.add("provider folder", setup.provider_dir, setup.provider_dir_source);
  if (!setup.env_var.empty()) {
    v.add(setup.env_var, fmt::format("{}", fmt::join(setup.env_entries, ":")),
          ctx.host.env().origin());
  }
  return std::nullopt;
}

// ---- rdma.verbs-lib --------------------------------------------------------

// The copy in a default or ld.so.conf folder (the distribution's), else the last.
const VerbsCopy& system_copy(const VerbsView& view) {
  for (const auto& copy : view.copies) {
    if (copy.match.origin != "LD_LIBRARY_PATH") return copy;
  }
  return view.copies.back();
}

}  // namespace

Outcome check_verbs_lib(const Context& ctx) {
  bool has_devices = !ctx.topo.nics.empty();
  Status bad = has_devices ? Status::fail : Status::warn;
  Verdict v;
  VerbsView view = look_up_verbs(ctx);

  auto loaded =
      ctx.host.libs().ibverbs
          ? ctx.host.libs().ibverbs()
          : Result<const host::dl::VerbsApi*>(make_error(ErrorCode::unavailable, "no loader"));
  if (loaded) {
    const auto* api = *loaded;
    v.add("dlopen libibverbs", api->path, "dlinfo");
    v.add("devices listed by libibverbs", std::to_string(api->device_count), "ibv_get_device_list");
    if (has_devices && api->device_count == 0) {
      v.note(Status::fail,
             fmt::format(
                 "{} loads but lists no device while sysfs shows {}: its providers do not load "
                 "(see rdma.provider-abi and rdma.provider-path) or /dev/infiniband is missing",
                 api->path, ctx.topo.nics.size()),
             "ibv_get_device_list() returns the devices of /sys/class/infiniband",
             std::string(k_reinstall_fix));
    }
  } else if (ctx.host.live()) {
    v.add("dlopen libibverbs", loaded.error().message, "dlerror");
    v.note(bad, fmt::format("libibverbs cannot be loaded: {}", loaded.error().message),
           "dlopen(\"libibverbs.so.1\") succeeds",
           "apt-get install libibverbs1 ibverbs-providers (rdma-core userspace)");
  }

  if (!ctx.host.live() && !view.has_library_dirs) {
    return skip(
        "the tree holds none of the loader's library folders (a sysfs-only snapshot): "
        "libibverbs cannot be checked from it");
  }
  add_copies(v, view);
  if (view.copies.empty() && !ctx.host.live()) {
    v.note(bad, "no libibverbs.so.1 in LD_LIBRARY_PATH, /etc/ld.so.conf or the default folders",
           "one libibverbs.so.1 reachable by the loader",
           "apt-get install libibverbs1 ibverbs-providers (rdma-core userspace)");
  }

  // Copies that differ in release or private ABI: which one a process gets
  // depends on its LD_LIBRARY_PATH, and the providers match only one of them.
  std::set<std::string> kinds;
  for (const auto& copy : view.copies) kinds.insert(copy.match.version + "/" + abi_text(copy));
  if (kinds.size() > 1) {
    const auto& first = view.copies.front();
    std::vector<std::string> others;
    for (std::size_t i = 1; i < view.copies.size(); ++i) {
      const auto& c = view.copies[i];
      others.push_back(fmt::format("{} ({}) in {}", c.match.version, abi_text(c), c.match.dir));
    }
    v.note(
        bad,
        fmt::format(
            "{} different libibverbs.so.1 are reachable: {} ({}) in {} wins because {}; also {}",
            view.copies.size(), first.match.version, abi_text(first), first.match.dir,
            why_first(first.match), fmt::join(others, ", ")),
        "one rdma-core userspace: a single libibverbs.so.1 on the search path",
        fmt::format("remove the extra copies (keep the one whose providers are installed), or put "
                    "the system one first: export LD_LIBRARY_PATH={}:$LD_LIBRARY_PATH",
                    env::shell_word(system_copy(view).match.dir)));
  }
  std::string pass_summary =
      view.copies.empty()
          ? "libibverbs loads"
          : fmt::format("libibverbs.so.1 {} ({}) from {} ({})", view.copies.front().match.version,
                        abi_text(view.copies.front()), view.copies.front().match.dir,
                        view.copies.front().match.origin);
  return v.finish(pass_summary);
}

// ---- rdma.provider-abi -----------------------------------------------------

Outcome check_provider_abi(const Context& ctx) {
  Verdict v;
  VerbsView view = look_up_verbs(ctx);
  VerbsSetup setup;
  if (auto early = prepare(ctx, view, setup, v)) return *early;
  const VerbsCopy& winner = *setup.winner;
  std::string verbs_name = fmt::format("libibverbs {}", winner.match.version);

  for (const auto& dp : device_providers(ctx, v)) {
    std::string wanted = provider_file_name(dp.provider, setup.abi);
    auto file = locate_provider(ctx, setup, dp.provider);
    const VerbsCopy* other_copy = nullptr;
    if (!file) {
      auto others = other_abi_providers(ctx, setup, dp.provider);
      if (others.empty()) {
        v.note(Status::unknown,
               fmt::format("no {} for {} anywhere libibverbs looks (see rdma.provider-path)",
                           wanted, fmt::join(dp.devices, ",")));
        continue;
      }
      std::vector<std::string> described;
      std::optional<int> other_abi;
      for (const auto& path : others) {
        auto elf = host::read_elf(ctx.host.fs(), path);
        std::optional<int> need = elf ? needed_abi(*elf) : std::nullopt;
        if (need && !other_abi) other_abi = need;
        described.push_back(
            fmt::format("{} needs {}", path,
                        need ? fmt::format("{}{}", k_private_prefix, *need)
                             : std::string(elf ? "no private ABI" : "unreadable file")));
        v.add(std::string(host::base_name(path)), described.back(), path);
      }
      if (other_abi) other_copy = copy_with_abi(view, *other_abi);
      v.note(Status::fail,
             fmt::format("{} defines {}{} and opens {} for {}; found only {}", verbs_name,
                         k_private_prefix, setup.abi, wanted, fmt::join(dp.devices, ","),
                         fmt::join(described, "; ")),
             fmt::format("{} needing {}{}", wanted, k_private_prefix, setup.abi),
             fmt::format("one rdma-core userspace: {}{}", k_reinstall_fix,
                         other_copy ? ", " + put_first_fix(*other_copy) : std::string()));
      continue;
    }
    v.add(wanted, fmt::format("{} ({})", file->real_path, file->how), file->node_path);
    auto elf = host::read_elf(ctx.host.fs(), file->node_path);
    if (!elf) {
      v.note(Status::fail,
             fmt::format("cannot read provider {}: {}", file->node_path, elf.error().message),
             "a readable ELF provider", std::string(k_reinstall_fix));
      continue;
    }
    auto need = needed_abi(*elf);
    if (!need) {
      v.note(Status::pass, fmt::format("{} needs no private libibverbs ABI", wanted));
      continue;
    }
    if (*need != setup.abi) {
      other_copy = copy_with_abi(view, *need);
      v.note(Status::fail,
             fmt::format(
                 "{} defines {}{}; {} needs {}{} (dlopen fails with \"version '{}{}' not found\")",
                 verbs_name, k_private_prefix, setup.abi, file->node_path, k_private_prefix, *need,
                 k_private_prefix, *need),
             fmt::format("{} needing {}{}", wanted, k_private_prefix, setup.abi),
             fmt::format("one rdma-core userspace: {}{}", k_reinstall_fix,
                         other_copy ? ", " + put_first_fix(*other_copy) : std::string()));
    }
  }
  return v.finish(fmt::format("{} defines {}{} and every device's provider needs it", verbs_name,
                              k_private_prefix, setup.abi));
}

namespace {

// ---- rdma.provider-path ----------------------------------------------------

void dangling_links(const Context& ctx, const std::string& dir, Verdict& v) {
  const auto& fs = ctx.host.fs();
  auto names = fs.list(dir);
  if (!names) return;
  for (const auto& name : *names) {
    std::string path = host::join_path(dir, name);
    auto info = fs.lstat(path);
    if (!info || info->type != host::FileType::symlink || fs.exists(path)) continue;
    std::string target = fs.readlink(path).value_or("?");
    v.add(path, "-> " + target + " (does not resolve)", path);
    v.note(
        Status::fail,
        fmt::format(
            "{} is a link to {}, which does not exist on this node (a link made on the host or "
            "into a folder mounted elsewhere)",
            path, target),
        "provider links that resolve inside the container",
        fmt::format("replace the link with a copy of the provider file: cp <provider> {}", path));
  }
}

}  // namespace

Outcome check_provider_path(const Context& ctx) {
  Verdict v;
  VerbsView view = look_up_verbs(ctx);
  VerbsSetup setup;
  if (auto early = prepare(ctx, view, setup, v)) return *early;
  const auto& fs = ctx.host.fs();

  for (const auto& dir : provider_dirs(setup)) dangling_links(ctx, dir, v);
  for (const auto& entry : setup.env_entries) {
    if (entry.front() == '/' && fs.is_dir(entry)) dangling_links(ctx, entry, v);
  }

  // RDMAV_DRIVERS entries: absolute ones are file prefixes, not folders;
  // names are looked up like the driver list's.
  for (std::size_t i = 0; i < setup.env_entries.size(); ++i) {
    const auto& entry = setup.env_entries[i];
    if (entry.front() != '/') {
      std::string file = provider_file_name(entry, setup.abi);
      if (fs.exists(host::join_path(setup.provider_dir, file)) ||
          !host::find_library(fs, ctx.host.env(), file).empty()) {
        continue;
      }
      v.note(Status::fail,
             fmt::format("{} entry {} names driver {}, but no {} is in {} or the loader's folders",
                         setup.env_var, i + 1, entry, file, setup.provider_dir),
             fmt::format("{}/{}", setup.provider_dir, file),
             fmt::format("remove {} from {} or install its provider", entry, setup.env_var));
      continue;
    }
    std::string opened = fmt::format("{}-rdmav{}.so", entry, setup.abi);
    if (fs.exists(opened)) continue;
    std::string why = fs.is_dir(entry)
                          ? fmt::format(
                                "{} is a folder, but libibverbs appends -rdmav{}.so to absolute "
                                "entries and opens {}, which does not exist",
                                entry, setup.abi, opened)
                          : fmt::format("libibverbs opens {}, which does not exist", opened);
    v.note(
        Status::fail, fmt::format("{} entry {}: {}", setup.env_var, i + 1, why),
        fmt::format("{} entries are driver names (mlx5) or file prefixes (/dir/libmlx5)",
                    setup.env_var),
        fmt::format(
            "copy the provider into {} (found by every process, no variable needed) and unset {}",
            setup.provider_dir, setup.env_var));
  }

  bool config_dir = false;
  auto configured = configured_drivers(ctx, v, config_dir);
  for (const auto& dp : device_providers(ctx, v)) {
    std::string wanted = provider_file_name(dp.provider, setup.abi);
    std::string devices = fmt::format("{}", fmt::join(dp.devices, ","));
    bool named_in_env =
        std::any_of(setup.env_entries.begin(), setup.env_entries.end(), [&](const std::string& e) {
          return e == dp.provider ||
                 (e.front() == '/' && host::base_name(e) == "lib" + dp.provider);
        });
    if (!configured.contains(dp.provider) && !named_in_env) {
      v.note(
          Status::fail,
          config_dir
              ? fmt::format("no {}/*.driver says \"driver {}\" and {} does not name it: libibverbs "
                            "never tries a provider for {}",
                            k_verbs_config_dir, dp.provider,
                            setup.env_var.empty() ? "RDMAV_DRIVERS" : setup.env_var, devices)
              : fmt::format("{} is missing: libibverbs reads no driver list and tries no provider "
                            "for {}",
                            k_verbs_config_dir, devices),
          fmt::format("{}/{}.driver containing \"driver {}\"", k_verbs_config_dir, dp.provider,
                      dp.provider),
          "apt-get install --reinstall ibverbs-providers");
    }
    auto file = locate_provider(ctx, setup, dp.provider);
    if (!file) {
      // The seed's fix: the provider of the right ABI may lie elsewhere under
      // its soname (libmlx5.so.1); copy it into the provider folder.
      std::string source = "<the lib" + dp.provider + " of the same rdma-core release>";
      for (const auto& m :
           host::find_library(fs, ctx.host.env(), fmt::format("lib{}.so.1", dp.provider))) {
        auto elf = host::read_elf(fs, m.real_path);
        if (elf && needed_abi(*elf) == setup.abi) {
          source = m.real_path;
          break;
        }
      }
      v.note(Status::fail,
             fmt::format(
                 "no {} for {} in {}{} or the loader's folders (libibverbs prints \"couldn't load "
                 "driver '{}'\")",
                 wanted, devices, setup.provider_dir,
                 setup.env_var.empty() ? "" : ", " + setup.env_var, wanted),
             fmt::format("{}/{}", setup.provider_dir, wanted),
             fmt::format("cp {} {}/{}", source, setup.provider_dir, wanted));
      continue;
    }
    v.add(wanted, fmt::format("{} ({})", file->real_path, file->how), file->node_path);
    if (file->via_env) {
      v.note(
          Status::warn,
          fmt::format(
              "{} is found only through {} ({}): a process started without that variable exported "
              "(a spawned worker, a sudo'd tool) does not find it",
              wanted, file->how.starts_with("loader") ? "LD_LIBRARY_PATH" : setup.env_var,
              file->node_path),
          fmt::format("{} in {}", wanted, setup.provider_dir),
          fmt::format("cp {} {}/{}", file->real_path, setup.provider_dir, wanted));
    }
  }
  return v.finish(fmt::format("every device's provider is in place for libibverbs' ABI {} ({})",
                              setup.abi, setup.provider_dir));
}

}  // namespace epkit::checks::rdma
