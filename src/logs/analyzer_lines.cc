// The analyser's line rules: one handler per kind of line (NCCL's INFO and
// WARN lines, NET/IB and GDR lines, init, plugins, launchers, problems,
// NVSHMEM, DeepEP and the catalogue's families). Each adds findings and facts
// for the line's rank; the rules across ranks are in analyzer_cross_rank.cc.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "logs/analyzer.h"
#include "logs/catalogue.h"
#include "logs/text.h"

namespace epkit::logs {
namespace {

constexpr std::size_t k_max_list = 64;  // devices, interfaces, HCAs per rank
constexpr int k_max_comm_ranks = 1 << 16;
constexpr std::size_t k_max_comm_slots = 1 << 22;
constexpr std::size_t k_max_pending = 256;  // Init START lines kept per communicator

void bump(std::vector<Count>& counts, std::string_view name) {
  for (auto& c : counts) {
    if (c.name == name) {
      ++c.count;
      return;
    }
  }
  if (counts.size() < k_max_names) counts.push_back({printable(name, 48), 1});
}

void push_unique(std::vector<std::string>& list, std::string value) {
  if (list.size() >= k_max_list) return;
  if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(std::move(value));
}

// "[0]eth0:10.0.0.2<0>" or "eth0:10.0.0.2<0>" -> {eth0, 10.0.0.2}.
Interface parse_interface(std::string_view token) {
  if (!token.empty() && token[0] == '[') {
    std::size_t close = token.find(']');
    if (close != std::string_view::npos) token.remove_prefix(close + 1);
  }
  std::size_t colon = token.find(':');
  std::string_view name = token.substr(0, colon);
  std::string_view address;
  if (colon != std::string_view::npos) {
    address = token.substr(colon + 1);
    address = address.substr(0, address.find('<'));
  }
  return {printable(name, 64), printable(address, 64)};
}

std::vector<Interface> parse_interfaces(std::string_view list) {
  std::vector<Interface> out;
  while (!list.empty() && out.size() < k_max_list) {
    list = trim(list);
    std::size_t end = list.find(' ');
    std::string_view token = list.substr(0, end);
    if (!token.empty() && token != "[RO]") out.push_back(parse_interface(token));
    if (end == std::string_view::npos) break;
    list.remove_prefix(end + 1);
  }
  return out;
}

bool is_bad_interface(const Interface& i) {
  std::string_view n = i.name, a = i.address;
  return n == "lo" || n.starts_with("docker") || n.starts_with("veth") || n.starts_with("virbr") ||
         n.starts_with("tunl") || a.starts_with("169.254.") || a.starts_with("127.") ||
         a.starts_with("fe80:");
}

// "NET/IB/0/GDRDMA" -> "NET/IB/GDRDMA", "NET/IB/1(3)/GDRDMA" -> "NET/IB/GDRDMA":
// device numbers differ per channel and would split the count.
std::string normalize_transport(std::string_view via) {
  std::string out;
  while (!via.empty()) {
    std::size_t slash = via.find('/');
    std::string_view part = via.substr(0, slash);
    if (!part.empty() && !(part[0] >= '0' && part[0] <= '9')) {
      if (!out.empty()) out += '/';
      out += part;
    }
    if (slash == std::string_view::npos) break;
    via.remove_prefix(slash + 1);
  }
  return printable(out, 48);
}

// Lines NCCL's maintainers call harmless: never a finding, even at WARN.
// libibverbs tries every provider /etc/libibverbs.d lists; a provider whose
// library is simply not installed matters only for the NICs GPU clusters
// run on. A missing provider for hardware of another kind (ipathverbs,
// vmw_pvrdma, rxe, ...) is noise printed on healthy nodes too. An ABI
// mismatch (IBVERBS_PRIVATE_n, undefined symbols) or a device with no
// provider always matters.
bool provider_failure_matters(std::string_view m) {
  if (contains(m, "no userspace device-specific driver")) return true;
  if (contains(m, "IBVERBS_PRIVATE_") && contains(m, "not found")) return true;
  if (!contains(m, "couldn't load driver")) return false;
  if (!contains(m, "cannot open shared object file")) return true;
  for (std::string_view nic :
       {"mlx5", "efa", "bnxt_re", "irdma", "erdma", "mana", "ionic", "hns"}) {
    if (contains(m, fmt::format("'lib{}-", nic)) || contains(m, fmt::format("'{}'", nic)))
      return true;
  }
  return false;
}

constexpr std::string_view k_no_libibverbs =
    "libibverbs.so cannot be loaded: NET/IB is unavailable (install libibverbs1 and "
    "ibverbs-providers in the image)";

bool is_benign(std::string_view m) {
  return contains(m, "Could not find: libnccl-") || contains(m, "dlvsym failed on mlx5dv_") ||
         contains(m, "Could not find: libnccl-env");
}

// Final shared-memory failures (WARN text); cleanup failures such as "unlink
// shared memory ... failed" are not about space.
bool is_shm_failure(std::string_view m) {
  return contains(m, "failed to extend") || contains(m, "failed to create shared memory") ||
         contains(m, "Error while creating shared memory") ||
         (contains(m, "Could not map") && contains(m, "/dev/shm")) ||
         contains(m, "posix_fallocate failed") || contains(m, "nable to allocate shared memory") ||
         (contains(m, "/dev/shm") && contains(m, "No space left on device"));
}

// The IB work completion status of a "Got completion" line, in any of the
// wordings NCCL has used (see on_problem).
std::optional<std::int64_t> completion_status(std::string_view m) {
  if (auto n = number_after(m, "with error ")) return n;
  std::size_t at = find_bytes(m, "status=");
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = m.substr(at + 7);
  rest = rest.substr(0, rest.find(' '));
  if (auto n = parse_uint(rest)) return static_cast<std::int64_t>(*n);
  std::size_t close = rest.find(')');
  if (rest.starts_with('(') && close != std::string_view::npos) {
    if (auto n = parse_uint(rest.substr(close + 1))) return static_cast<std::int64_t>(*n);
  }
  std::size_t open = rest.find('(');
  if (open != std::string_view::npos) {
    if (auto n = parse_uint(rest.substr(open + 1))) return static_cast<std::int64_t>(*n);
  }
  return std::nullopt;
}

}  // namespace

void Analyzer::count_collective(RankFacts* facts, std::string_view name) {
  if (facts != nullptr) bump(facts->collectives, name);
  if (m_report.sliced) {
    std::size_t s = std::min(m_slice_in_file, m_report.slices.size() - 1);
    bump(m_report.slices[s].collectives, name);
  }
}

// Kept out of on_nccl, whose INFO/COLL path is the hot one: WARN lines are
// rare and their handling large.
void Analyzer::on_nccl_warn(const LineInfo& info, Location at, int rank) {
  std::string_view m = info.message;
  if (contains(m, "Failed to initialize any NET plugin")) {
    if (HostFacts* host = host_of(info)) {
      host->plugin = "none initialised";
      host->plugin_at = evidence(at, rank);
    }
  }
  if (!on_problem(m, at, rank) && !is_benign(m) &&
      !on_catalogue(Source::nccl, m, info.source_path, at, rank))
    add(Rule::other_warn, at, rank);
}

void Analyzer::on_nccl(const LineInfo& info, Location at, int rank) {
  if (info.nvshmem) {
    on_nvshmem(info, at, rank);
    return;
  }
  std::string_view m = info.message;
  if (info.level == Level::warn) {
    on_nccl_warn(info, at, rank);
    return;
  }
  RankFacts* facts = facts_of(info, rank);
  // The hot path: COLL lines, "AllReduce: opCount 1a sendbuff ...".
  if (!m.empty() && m[0] >= 'A' && m[0] <= 'Z') {
    std::size_t colon = m.substr(0, 32).find(':');
    if (colon != std::string_view::npos && m.substr(colon + 1).starts_with(" opCount ")) {
      count_collective(facts, m.substr(0, colon));
      return;
    }
  }
  if (m.starts_with("Channel ")) {
    std::size_t via = find_bytes(m, " via ");
    if (via != std::string_view::npos && facts != nullptr) {
      std::string_view word = m.substr(via + 5);
      word = word.substr(0, word.find(' '));
      std::string name = normalize_transport(word);
      bump(facts->transports, name);
    }
    return;
  }
  if (m.starts_with("NCCL version ")) {
    std::string version = printable(word_after(m, "NCCL version "), 64);
    if (HostFacts* host = host_of(info)) {
      host->nccl_version = version;
      host->version_at = evidence(at, rank);
    }
    if (facts != nullptr) {
      facts->nccl_version = std::move(version);
      facts->version_at = evidence(at, rank);
    }
    return;
  }
  if (m.starts_with("Failed to open libibverbs")) {
    // NCCL 2.12 and later say it at INFO level (WARN before): no libibverbs
    // in the process, so NET/IB cannot start and the network is sockets.
    add(Rule::socket_fallback, at, rank, std::string(k_no_libibverbs));
    return;
  }
  if (m.starts_with("Using network ")) {
    std::string_view net = trim(m.substr(14));
    if (HostFacts* host = host_of(info)) {
      host->network = printable(net, 64);
      host->network_at = evidence(at, rank);
    }
    if (facts != nullptr) {
      facts->network = printable(net, 64);
      facts->network_at = evidence(at, rank);
    }
    if (net == "Socket") add(Rule::socket_fallback, at, rank);
    return;
  }
  if (m.starts_with("NET/Plugin") || m.starts_with("Plugin Path")) {
    on_plugin(m, at, host_of(info));
    return;
  }
  if (m.starts_with("NET/")) {
    if (contains(m, "GPU Direct RDMA")) {
      on_gdr(m, at, rank);
    } else if (contains(m, " Using ") || contains(m, ": Using")) {
      on_net_using(m, at, rank);
      HostFacts* host = host_of(info);
      if (host != nullptr && facts != nullptr) {
        host->net_devices = fmt::format("NET/{} {}", facts->net_name, facts->net_devices.size());
        host->devices_at = evidence(at, rank);
      }
    }
    return;
  }
  if (m.starts_with("GPU Direct RDMA")) {
    on_gdr(m, at, rank);
    return;
  }
  if (m.starts_with("Bootstrap")) {
    std::size_t using_at = find_bytes(m, "Using");
    if (using_at != std::string_view::npos) {
      auto ifs = parse_interfaces(m.substr(using_at + 5));
      check_interfaces(ifs, "bootstrap", at, rank);
      if (facts != nullptr) facts->bootstrap = std::move(ifs);
    }
    return;
  }
  if (contains(m, "Init COMPLETE") || contains(m, "Init START")) {
    on_init(m, at, rank);
    return;
  }
  // Problems are WARN lines, with one exception: NCCL reports the NET device
  // mismatch it was told to ignore at INFO. Other INFO lines that look alike
  // ("fallocate: Failed ... - retrying", "MMAP allocated ... /dev/shm/...")
  // are normal operation.
  if (contains(m, "mixed local Net device counts")) on_problem(m, at, rank);
}

void Analyzer::on_net_using(std::string_view m, Location at, int rank) {
  RankFacts* facts =
      rank >= 0 ? &m_report.ranks[static_cast<std::size_t>(rank)] : &m_report.unranked;
  std::string_view name = m.substr(4);
  name = name.substr(0, name.find_first_of(" :"));
  std::size_t using_at = find_bytes(m, "Using");
  std::string_view list = m.substr(using_at + 5);
  std::string_view oob;
  if (std::size_t semi = list.find(';'); semi != std::string_view::npos) {
    std::string_view tail = list.substr(semi + 1);
    list = list.substr(0, semi);
    std::size_t oob_at = find_bytes(tail, "OOB ");
    if (oob_at != std::string_view::npos) oob = tail.substr(oob_at + 4);
  }
  // Device tokens all start with "[i]"; "[RO]" (relaxed ordering) is a flag.
  std::vector<std::string> devices;
  std::vector<Interface> socket_ifs;
  bool is_socket = name == "Socket" || contains(name, "Socket");
  std::string_view rest = list;
  while (!rest.empty() && devices.size() < k_max_list) {
    rest = trim(rest);
    std::size_t end = rest.find(' ');
    std::string_view token = rest.substr(0, end);
    if (token.size() > 3 && token[0] == '[' && token[1] >= '0' && token[1] <= '9') {
      Interface i = parse_interface(token);
      if (is_socket) {
        devices.push_back(i.name);
        socket_ifs.push_back(std::move(i));
      } else {
        std::string_view dev = token.substr(token.find(']') + 1);
        devices.push_back(printable(dev, 64));
      }
    }
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  if (is_socket) check_interfaces(socket_ifs, fmt::format("NET/{}", printable(name, 32)), at, rank);
  std::vector<std::string> bonds;
  for (const auto& d : devices) {
    if (contains(d, "bond")) bonds.push_back(d);
  }
  if (!is_socket && !bonds.empty() && bonds.size() < devices.size()) {
    add(Rule::bond_in_hca, at, rank, join(bonds, " "));
  }
  auto oob_ifs = parse_interfaces(oob);
  check_interfaces(oob_ifs, "OOB", at, rank);
  if (facts != nullptr) {
    facts->net_name = printable(name, 32);
    facts->net_devices = std::move(devices);
    facts->devices_at = evidence(at, rank);
    if (!oob_ifs.empty()) facts->oob = std::move(oob_ifs);
  }
}

void Analyzer::check_interfaces(const std::vector<Interface>& ifs, std::string_view what,
                                Location at, int rank) {
  for (const auto& i : ifs) {
    if (is_bad_interface(i)) {
      add(Rule::bad_interface, at, rank,
          fmt::format("{} on {}{}{}", what, i.name, i.address.empty() ? "" : " ", i.address));
    }
  }
}

void Analyzer::on_gdr(std::string_view m, Location at, int rank) {
  RankFacts* facts =
      rank >= 0 ? &m_report.ranks[static_cast<std::size_t>(rank)] : &m_report.unranked;
  bool disabled = contains(m, "RDMA Disabled") || contains(m, "RDMA disabled");
  // "... for HCA 0 'mlx5_0'" names the HCA; the distance form names a GPU/NIC pair.
  std::string hca;
  if (std::size_t q = m.find('\''); q != std::string_view::npos) {
    std::string_view rest = m.substr(q + 1);
    hca = printable(rest.substr(0, rest.find('\'')), 64);
  }
  if (!disabled) {
    if (facts != nullptr && !hca.empty()) push_unique(facts->gdr_enabled, hca);
    return;
  }
  if (contains(m, "distance")) {
    if (facts != nullptr) ++facts->gdr_distance_disabled;
    add(Rule::gdr_distance, at, rank);
    return;
  }
  if (facts != nullptr && !hca.empty()) push_unique(facts->gdr_disabled, hca);
  // NET/Socket prints this for every interface: sockets never do GPUDirect
  // RDMA, so it is a fact, not a finding (seen on every single-node run).
  if (contains(m, "NET/Socket")) return;
  add(Rule::gdr_no_peer_memory, at, rank, hca);
}

void Analyzer::on_init(std::string_view m, Location at, int rank) {
  std::string_view comm_id = word_after(m, "commId ");
  auto nccl_rank = number_after(m, " rank ");
  auto nranks = number_after(m, " nranks ");
  if (!nranks) nranks = number_after(m, " nRanks ");
  if (comm_id.empty() || !nccl_rank || !nranks || *nranks <= 0 || *nranks > k_max_comm_ranks ||
      *nccl_rank < 0 || *nccl_rank >= *nranks) {
    return;
  }
  auto [it, inserted] =
      m_comm_index.try_emplace(std::string(comm_id), m_report.communicators.size());
  if (inserted) {
    // Per-rank slots of all communicators together are capped, so a log of
    // many large (or forged) communicators cannot grow memory without bound.
    if (m_comm_slots + static_cast<std::size_t>(*nranks) > k_max_comm_slots) {
      m_comm_index.erase(it);
      return;
    }
    m_comm_slots += static_cast<std::size_t>(*nranks);
    Communicator c;
    c.comm_id = printable(comm_id, 64);
    c.nranks = static_cast<int>(*nranks);
    c.owner.assign(static_cast<std::size_t>(c.nranks), -1);
    c.complete.assign(static_cast<std::size_t>(c.nranks), false);
    c.unranked_seen.assign(static_cast<std::size_t>(c.nranks), false);
    c.first_at = evidence(at, rank);
    m_report.communicators.push_back(std::move(c));
  }
  Communicator& c = m_report.communicators[it->second];
  auto r = static_cast<std::size_t>(*nccl_rank);
  if (r >= c.owner.size()) return;  // same commId printed with another nranks: ignore
  if (rank >= 0) {
    c.owner[r] = rank;
  } else {
    c.unranked_seen[r] = true;
  }
  if (contains(m, "Init COMPLETE")) {
    if (!c.complete[r]) {
      c.complete[r] = true;
      ++c.complete_count;
    }
    c.pending.erase(static_cast<int>(r));
  } else if (!c.complete[r] && c.pending.size() < k_max_pending) {
    // Evidence only: the missing ranks themselves are known from `complete`.
    c.pending.try_emplace(static_cast<int>(r), evidence(at, rank));
  }
}

// The NET plugin lines of NCCL 2.4 to 2.28: "Loaded net plugin X (vN)" and
// "Plugin Path : /p/libnccl-net.so" when one loads; "Plugin load (lib)
// returned 2", "No plugin found", "Using internal network plugin" and "Could
// not find: libnccl-net.so" when none does. A loaded plugin is never undone
// by a later "not found" line of another plugin kind.
void Analyzer::on_plugin(std::string_view m, Location at, HostFacts* host) {
  if (host == nullptr) return;
  std::string_view path;
  if (std::size_t p = find_bytes(m, "Plugin Path"); p != std::string_view::npos) {
    std::string_view rest = m.substr(p + 11);
    path = trim(rest.substr(rest.find(':') == std::string_view::npos ? 0 : rest.find(':') + 1));
    if (!host->plugin.starts_with("external")) {
      host->plugin = "external";
      host->plugin_at = evidence(at, -1);
    }
  } else if (std::size_t l = find_bytes(m, "Loaded net plugin "); l != std::string_view::npos) {
    std::string_view name = m.substr(l + 18);
    name = trim(name.substr(0, name.find(" (")));
    host->plugin = "external " + printable(name, 64);
    host->plugin_at = evidence(at, -1);
  } else if (contains(m, "Plugin load") || contains(m, "No plugin found") ||
             contains(m, "internal network plugin") || contains(m, "internal implementation") ||
             contains(m, "Could not find: libnccl-net")) {
    if (!host->plugin.starts_with("external") && host->plugin != "internal (none found)") {
      host->plugin = "internal (none found)";
      host->plugin_at = evidence(at, -1);
    }
    if (std::size_t open = find_bytes(m, "Plugin load ("); open != std::string_view::npos) {
      path = m.substr(open + 13);
      path = path.substr(0, path.find(')'));
    } else if (std::size_t cnf = find_bytes(m, "Could not find: "); cnf != std::string_view::npos) {
      path = word_after(m, "Could not find: ");
      if (path.ends_with('.')) path.remove_suffix(1);
    } else if (contains(m, "when loading ")) {
      path = word_after(m, "when loading ");
    }
    if (!path.empty() && host->plugin.starts_with("external")) return;
  }
  if (!path.empty()) {
    host->plugin_path = printable(path, 128);
    host->path_at = evidence(at, -1);
  }
}

// "mpirun -np 16 -H a:8,b:8 -x NCCL_DEBUG=INFO ./all_reduce_perf" (also after
// a shell prompt "$ " or "+ "): the hosts it names and the settings it passes.
bool Analyzer::on_launch(std::string_view m, Location at) {
  std::string_view s = trim(m);
  if (s.starts_with("$ ") || s.starts_with("+ ") || s.starts_with("# ")) s = trim(s.substr(2));
  if (!s.starts_with("mpirun ") && !s.starts_with("mpiexec ") && !s.starts_with("prterun "))
    return false;
  if (m_report.launches.size() >= k_max_launches) return true;
  Launch launch;
  launch.command = printable(s, 240);
  launch.at = evidence(at, -1);
  std::string_view rest = s;
  std::string_view previous;
  while (!rest.empty()) {
    rest = trim(rest);
    std::size_t end = rest.find(' ');
    std::string_view word = rest.substr(0, end);
    if (previous == "-H" || previous == "--host" || previous == "-host") {
      while (!word.empty() && launch.hosts.size() < 64) {
        std::size_t comma = word.find(',');
        std::string_view host = word.substr(0, comma);
        host = host.substr(0, host.find(':'));  // "a:8" = 8 slots on a
        if (!host.empty()) {
          launch.hosts.push_back(printable(host, 128));
          host_named(host);
        }
        if (comma == std::string_view::npos) break;
        word.remove_prefix(comma + 1);
      }
    } else if (previous == "-x" && launch.env.size() < 32 &&
               (word.starts_with("NCCL_") || word.starts_with("NVSHMEM_") ||
                word.starts_with("UCX_"))) {
      launch.env.push_back(printable(word, 128));
    }
    previous = word;
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  m_report.launches.push_back(std::move(launch));
  return true;
}

bool Analyzer::on_problem(std::string_view m, Location at, int rank) {
  if (contains(m, "Failed to open libibverbs")) {
    add(Rule::socket_fallback, at, rank, std::string(k_no_libibverbs));
  } else if (contains(m, "Failed to initialize any NET plugin")) {
    add(Rule::net_plugin, at, rank);
  } else if (contains(m, "TORCH_NCCL_USE_COMM_NONBLOCKING") && contains(m, "mismatch")) {
    add(Rule::gib_nonblocking, at, rank);
  } else if (contains(m, "Mismatched NCCL version")) {
    add(Rule::version_mismatch, at, rank);
  } else if (contains(m, "mixed local Net device counts")) {
    add(contains(m, "Ignoring") ? Rule::net_mismatch_ignored : Rule::net_mismatch, at, rank);
  } else if (contains(m, "Got completion") && !contains(m, "Got completion for")) {
    // Every wording of NCCL 2.4 to 2.30 (NET/IB, NET/IB/GIN, resiliency):
    // "with error 12, opcode 0, ..., vendor err 129" (<= 2.9 without "from
    // peer"), "with status=12 ...", "status=IBV_WC_RETRY_EXC_ERR(12) ...
    // vendor_err=129" and "wc->status=(IBV_WC_RETRY_EXC_ERR)12".
    std::optional<std::int64_t> status = completion_status(m);
    std::optional<std::int64_t> vendor = number_after(m, "vendor err ");
    if (!vendor) vendor = number_after(m, "vendor_err=");
    if (status == 4 || vendor == 81) {
      add(Rule::acs, at, rank);
    } else if (status == 12 || vendor == 129) {
      add(Rule::roce_unreachable, at, rank);
    } else if (status == 5) {
      // Flushed: follows an earlier error on the queue pair, the one to read.
      add(Rule::other_warn, at, rank);
    } else {
      return false;  // the catalogue's nccl.ib-completion names the others
    }
  } else if (contains(m, "Unable to open device") ||
             contains(m, "Call to ibv_open_device failed")) {
    // "NET/IB : Unable to open device erdma_1" (NCCL 2.4 to 2.30), after
    // the wrapper's "Call to ibv_open_device failed".
    std::string detail = printable(word_after(m, "Unable to open device "), 64);
    if (!detail.empty() && rank >= 0) {
      const std::string& host = m_report.ranks[static_cast<std::size_t>(rank)].host;
      if (!host.empty()) detail += " on " + host;
    }
    add(Rule::ib_open_failed, at, rank, std::move(detail));
  } else if (contains(m, "Duplicate GPU detected")) {
    std::string detail;
    if (auto dev = word_after(m, "CUDA device "); !dev.empty())
      detail = fmt::format("CUDA device (bus id) {}", printable(dev, 32));
    add(Rule::duplicate_gpu, at, rank, std::move(detail));
  } else if (contains(m, "Error while attaching to shared memory")) {
    // Opening a segment a peer made, not making one: not about space. A
    // size of 0 (and a garbled name) is a peer's cuMem host descriptor read
    // as a /dev/shm name: the ranks disagree on cuMem host memory.
    if (contains(m, "(size 0)")) {
      add_family(family_index("nccl.cumem"), m, at, rank);
    } else {
      add(Rule::shm_attach, at, rank);
    }
  } else if (is_shm_failure(m)) {
    add(Rule::shm, at, rank);
  } else if ((contains(m, "ibv_reg_mr") || contains(m, "ibv_create_cq") ||
              contains(m, "ibv_reg_dmabuf_mr")) &&
             contains(m, "Cannot allocate memory")) {
    add(Rule::memlock, at, rank);
  } else {
    return false;
  }
  return true;
}

void Analyzer::on_other(const LineInfo& info, Location at, int rank) {
  std::string_view m = info.message;
  if (m_slice && m_report.slices.size() < k_max_slices && re2::RE2::PartialMatch(m, *m_slice)) {
    ++m_slice_in_file;
    if (m_slice_in_file >= m_report.slices.size())
      m_report.slices.push_back({printable(m, 120), {}});
    return;
  }
  if (m.starts_with("NCCL version ")) {
    // Printed without a prefix by rank 0 of NCCL <= 2.2x and by nccl-tests.
    if (RankFacts* facts = facts_of(info, rank)) {
      facts->nccl_version = printable(word_after(m, "NCCL version "), 64);
      facts->version_at = evidence(at, rank);
    }
    if (HostFacts* host = host_of(info)) {
      host->nccl_version = printable(word_after(m, "NCCL version "), 64);
      host->version_at = evidence(at, rank);
    }
    return;
  }
  if (m.starts_with("#  Rank ") || m.starts_with("#   Rank ")) {
    // nccl-tests: "#  Rank  0 Group  0 Pid  1234 on node-a device  0 [...]".
    std::size_t on = find_bytes(m, " on ");
    if (on != std::string_view::npos) {
      std::string_view host = trim(m.substr(on + 4));
      host_named(host.substr(0, host.find(' ')));
    }
    return;
  }
  if (on_launch(m, at)) return;
  if (contains(m, "couldn't load driver") || contains(m, "no userspace device-specific driver") ||
      (contains(m, "IBVERBS_PRIVATE_") && contains(m, "not found"))) {
    if (provider_failure_matters(m)) add(Rule::provider_abi, at, rank);
  } else if (contains(m, "cudaHostRegister with IoMemory failed") ||
             contains(m, "GPU cannot map UAR")) {
    add(Rule::ibgda_mapping, at, rank);
  } else if (contains(m, "DeepEP timeout") || contains(m, "DeepEP error: timeout")) {
    note_deepep_peers(m, info.launcher_rank);
    add(Rule::deepep_timeout, at, rank);
  } else if (contains(m, "Watchdog caught collective operation timeout")) {
    std::string detail;
    if (auto seq = number_after(m, "SeqNum="); seq) {
      detail = fmt::format("SeqNum={} OpType={}", *seq, printable(word_after(m, "OpType="), 32));
    }
    add(Rule::watchdog_timeout, at, rank, std::move(detail));
  } else if (!is_benign(m) && !on_problem(m, at, rank)) {
    // (on_problem: NCCL text re-printed by frameworks, "Last error: ...".)
    // The line after PyTorch's "Last error:" is NCCL's last WARN message.
    if (!(m_after_last_error && on_catalogue(Source::nccl, m, {}, at, rank)))
      on_catalogue_other(m, at, rank);
  }
  std::string_view t = trim(m);
  if (!t.empty()) m_after_last_error = t.ends_with("Last error:");
}

// NVSHMEM_DEBUG lines ("host:pid:tid [dev] NVSHMEM INFO|WARN ..."): WARN
// lines are matched against NVSHMEM's wordings, with the source path as the
// fallback name.
void Analyzer::on_nvshmem(const LineInfo& info, Location at, int rank) {
  if (rank >= 0) m_report.ranks[static_cast<std::size_t>(rank)].nvshmem = true;
  m_file_nvshmem = true;
  if (info.level != Level::warn) return;
  if (!on_catalogue(Source::nvshmem, info.message, info.source_path, at, rank))
    add(Rule::other_warn, at, rank);
}

// Lines without an NCCL prefix that NVSHMEM's error macros ("FILE:LINE:
// non-zero status: N ...", "WARN: ...") or DeepEP (timeouts, assertions,
// exceptions) print. A cheap test first: most such lines are the
// application's own output.
void Analyzer::note_deepep_peers(std::string_view m, int reporter) {
  if (reporter >= 0) m_deepep_reporters.insert(reporter);
  for (std::string_view key : {"dst_rank ", "src_rank ", "dst_rank: ", "src_rank: "}) {
    auto peer = number_after(m, key);
    if (peer && *peer >= 0 && *peer < (1 << 20) && m_deepep_waited.size() < 4096)
      ++m_deepep_waited[static_cast<int>(*peer)];
  }
}

void Analyzer::on_catalogue_other(std::string_view m, Location at, int rank) {
  std::string_view path = source_path_of(m);
  bool deepep = contains(m, "DeepEP") || contains(m, "Assertion") || contains(m, "deep_ep") ||
                contains(m, "EPException") || contains(m, "NVCC") || contains(m, "cuobjdump");
  bool nvshmem =
      !path.empty() || m.starts_with("WARN: ") || contains(m, "nvshmem") || contains(m, "NVSHMEM");
  if (nvshmem && !deepep && on_catalogue(Source::nvshmem, m, path, at, rank)) {
    m_file_nvshmem = true;
    return;
  }
  if (deepep && !contains(path, "nvshmem")) {
    on_catalogue(Source::deepep, m, {}, at, rank);
    return;
  }
  // Processes that share stderr split NVSHMEM's "FILE:LINE: non-zero status:
  // 7 " from its message ("connect EPS failed" alone on the next line). In a
  // file that already showed NVSHMEM output, a bare line that starts with an
  // NVSHMEM wording is taken as one.
  if (m_file_nvshmem && !nvshmem) {
    std::string_view bare = trim(m);
    if (bare.size() >= 8 && bare.size() <= 240) {
      CatalogueMatch match = match_catalogue(Source::nvshmem, bare, {}, true);
      if (match.family >= 0) on_catalogue(Source::nvshmem, bare, {}, at, rank);
    }
  }
}

bool Analyzer::on_catalogue(Source source, std::string_view m, std::string_view path, Location at,
                            int rank) {
  CatalogueMatch match = match_catalogue(source, m, path);
  if (match.family < 0) return false;
  if (source == Source::nvshmem && rank >= 0)
    m_report.ranks[static_cast<std::size_t>(rank)].nvshmem = true;
  add_family(match.family, m, at, rank);
  return true;
}

void Analyzer::add_family(int family_index, std::string_view m, Location at, int rank) {
  const Family& family = catalogue_families()[static_cast<std::size_t>(family_index)];
  if (family.rule == Rule::deepep_timeout) {
    int reporter = rank >= 0 ? m_report.ranks[static_cast<std::size_t>(rank)].launcher_rank : -1;
    note_deepep_peers(m, reporter);
  }
  if (family.rule) {
    add(*family.rule, at, rank);
    return;
  }
  auto slot = static_cast<std::size_t>(family_index);
  if (m_family_findings.empty()) {
    m_family_findings.resize(catalogue_families().size());
    m_family_ranks.resize(catalogue_families().size());
  }
  Finding& f = m_family_findings[slot];
  if (f.spec == nullptr) {
    f.spec = &family_spec(slot);
    f.look_for = family.evidence;
  }
  ++f.count;
  ++m_adds;
  if (rank < 0) ++f.unranked;
  if (f.evidence.size() < k_max_evidence) f.evidence.push_back(evidence(at, rank));
  // The wording itself names what happened ("mlx5_3:1 Got async event :
  // port error"): distinct messages are the details.
  if (f.details.size() < k_max_details) {
    std::string detail = printable(trim(m), 160);
    if (std::find(f.details.begin(), f.details.end(), detail) == f.details.end())
      f.details.push_back(std::move(detail));
  }
  m_family_ranks[slot].add(rank);
}

}  // namespace epkit::logs
