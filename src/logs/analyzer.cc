#include "logs/analyzer.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "logs/text.h"

namespace epkit::logs {
namespace {

static_assert(static_cast<std::size_t>(Rule::other_warn) + 1 == 22,
              "Analyzer::m_findings holds one slot per rule");

constexpr std::size_t k_max_finding_ranks = 16;  // labels listed per finding
constexpr std::size_t k_max_list = 64;           // devices, interfaces, HCAs per rank
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
bool is_benign(std::string_view m) {
  return contains(m, "Could not find: libnccl-") || contains(m, "dlvsym failed on mlx5dv_") ||
         contains(m, "Could not find: libnccl-env");
}

// Final shared-memory failures (WARN text); cleanup failures such as "unlink
// shared memory ... failed" are not about space.
bool is_shm_failure(std::string_view m) {
  return contains(m, "failed to extend") || contains(m, "failed to create shared memory") ||
         contains(m, "Error while creating shared memory") ||
         contains(m, "Error while attaching to shared memory") ||
         (contains(m, "Could not map") && contains(m, "/dev/shm")) ||
         contains(m, "posix_fallocate failed") || contains(m, "nable to allocate shared memory") ||
         (contains(m, "/dev/shm") && contains(m, "No space left on device"));
}

std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

}  // namespace

int Report::exit_code() const {
  if (findings.empty()) return 0;
  switch (worst) {
    case Severity::info:
      return 0;
    case Severity::warn:
      return 1;
    case Severity::error:
      return 2;
  }
  return 2;
}

const Finding* Report::find(std::string_view id) const {
  for (const auto& f : findings) {
    if (f.spec->id == id) return &f;
  }
  return nullptr;
}

Result<Analyzer> Analyzer::create(const Options& options) {
  Analyzer a;
  if (!options.slice_regex.empty()) {
    try {
      a.m_slice = std::make_unique<std::regex>(options.slice_regex, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return make_error(ErrorCode::invalid,
                        fmt::format("--slice '{}': not a regular expression ({})",
                                    options.slice_regex, e.what()));
    }
    a.m_report.sliced = true;
    a.m_report.slices.push_back({});
  }
  return a;
}

void Analyzer::begin_file(const std::string& name) {
  m_file = name;
  m_report.files.push_back(name);
  m_slice_in_file = 0;
  m_last_rank = -1;
  m_last_key.clear();
}

Evidence Analyzer::evidence(Location at) const {
  return {m_file, at.line_no, printable(at.line)};
}

int Analyzer::new_rank(std::string label) {
  if (m_report.ranks.size() >= k_max_ranks) return -1;
  RankFacts facts;
  facts.label = std::move(label);
  m_report.ranks.push_back(std::move(facts));
  return static_cast<int>(m_report.ranks.size() - 1);
}

int Analyzer::rank_of(const LineInfo& info) {
  int idx = -1;
  if (!info.rank_key.empty()) {
    if (m_last_rank >= 0 && info.rank_key == m_last_key) {
      idx = m_last_rank;
    } else {
      auto it = m_rank_index.find(info.rank_key);
      if (it != m_rank_index.end()) {
        idx = it->second;
      } else {
        // A launcher-only record ("rank 3" from lines before NCCL printed
        // anything) becomes this process's record.
        auto launcher = info.launcher_rank >= 0 ? m_launcher_index.find(info.launcher_rank)
                                                : m_launcher_index.end();
        if (launcher != m_launcher_index.end() &&
            m_report.ranks[static_cast<std::size_t>(launcher->second)].host.empty()) {
          idx = launcher->second;
          m_report.ranks[static_cast<std::size_t>(idx)].label = printable(info.rank_key, 128);
        } else {
          idx = new_rank(printable(info.rank_key, 128));
        }
        if (idx < 0) return -1;
        m_rank_index.emplace(std::string(info.rank_key), idx);
        auto& f = m_report.ranks[static_cast<std::size_t>(idx)];
        f.host = printable(info.host, 128);
        f.pid = info.pid;
        f.cuda_dev = info.cuda_dev;
      }
      m_last_key.assign(info.rank_key);
      m_last_rank = idx;
    }
    if (info.launcher_rank >= 0) {
      auto& f = m_report.ranks[static_cast<std::size_t>(idx)];
      if (f.launcher_rank < 0) {
        f.launcher_rank = info.launcher_rank;
        m_launcher_index.emplace(info.launcher_rank, idx);
      }
    }
    return idx;
  }
  if (info.launcher_rank >= 0) {
    auto it = m_launcher_index.find(info.launcher_rank);
    if (it != m_launcher_index.end()) return it->second;
    idx = new_rank(fmt::format("rank {}", info.launcher_rank));
    if (idx < 0) return -1;
    m_report.ranks[static_cast<std::size_t>(idx)].launcher_rank = info.launcher_rank;
    m_launcher_index.emplace(info.launcher_rank, idx);
    return idx;
  }
  return -1;
}

void Analyzer::add(Rule rule, Location at, int rank, std::string detail) {
  auto slot = static_cast<std::size_t>(rule);
  Finding& f = m_findings[slot];
  if (f.spec == nullptr) f.spec = &spec_of(rule);
  ++f.count;
  if (f.evidence.size() < k_max_evidence) f.evidence.push_back(evidence(at));
  if (!detail.empty() && f.details.size() < k_max_details &&
      std::find(f.details.begin(), f.details.end(), detail) == f.details.end()) {
    f.details.push_back(std::move(detail));
  }
  m_finding_ranks[slot].add(rank);
}

void Analyzer::RankSet::add(int rank) {
  if (rank < 0) return;
  auto r = static_cast<std::size_t>(rank);
  if (r >= seen.size()) seen.resize(r + 1, false);
  if (seen[r]) return;
  seen[r] = true;
  ++count;
  if (first.size() < k_max_finding_ranks) first.push_back(rank);
}

void Analyzer::feed(std::string_view line, std::uint64_t line_no) {
  ++m_report.lines;
  LineInfo info = parse_line(line);
  int rank = rank_of(info);
  if (rank >= 0) {
    ++m_report.ranks[static_cast<std::size_t>(rank)].lines;
  } else if (!info.rank_key.empty() || info.launcher_rank >= 0) {
    ++m_report.unattributed_lines;
  }
  Location at{line, line_no};
  if (info.level == Level::none) {
    on_other(info, at, rank);
  } else {
    on_nccl(info, at, rank);
  }
}

void Analyzer::count_collective(RankFacts* facts, std::string_view name) {
  if (facts != nullptr) bump(facts->collectives, name);
  if (m_report.sliced) {
    std::size_t s = std::min(m_slice_in_file, m_report.slices.size() - 1);
    bump(m_report.slices[s].collectives, name);
  }
}

void Analyzer::on_nccl(const LineInfo& info, Location at, int rank) {
  std::string_view m = info.message;
  RankFacts* facts = rank >= 0 ? &m_report.ranks[static_cast<std::size_t>(rank)] : nullptr;
  if (info.level == Level::warn) {
    if (!on_problem(m, at, rank) && !is_benign(m)) add(Rule::other_warn, at, rank);
    return;
  }
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
    if (facts != nullptr) {
      facts->nccl_version = printable(word_after(m, "NCCL version "), 64);
      facts->version_at = evidence(at);
    }
    return;
  }
  if (m.starts_with("Using network ")) {
    std::string_view net = trim(m.substr(14));
    if (facts != nullptr) {
      facts->network = printable(net, 64);
      facts->network_at = evidence(at);
    }
    if (net == "Socket") add(Rule::socket_fallback, at, rank);
    return;
  }
  if (m.starts_with("NET/")) {
    if (contains(m, "GPU Direct RDMA")) {
      on_gdr(m, at, rank);
    } else if (contains(m, " Using ") || contains(m, ": Using")) {
      on_net_using(m, at, rank);
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
  RankFacts* facts = rank >= 0 ? &m_report.ranks[static_cast<std::size_t>(rank)] : nullptr;
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
    facts->devices_at = evidence(at);
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
  RankFacts* facts = rank >= 0 ? &m_report.ranks[static_cast<std::size_t>(rank)] : nullptr;
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
    c.first_at = evidence(at);
    m_report.communicators.push_back(std::move(c));
  }
  Communicator& c = m_report.communicators[it->second];
  auto r = static_cast<std::size_t>(*nccl_rank);
  if (r >= c.owner.size()) return;  // same commId printed with another nranks: ignore
  if (rank >= 0) c.owner[r] = rank;
  if (contains(m, "Init COMPLETE")) {
    if (!c.complete[r]) {
      c.complete[r] = true;
      ++c.complete_count;
    }
    c.pending.erase(static_cast<int>(r));
  } else if (!c.complete[r] && c.pending.size() < k_max_pending) {
    // Evidence only: the missing ranks themselves are known from `complete`.
    c.pending.try_emplace(static_cast<int>(r), evidence(at));
  }
}

bool Analyzer::on_problem(std::string_view m, Location at, int rank) {
  if (contains(m, "Failed to initialize any NET plugin")) {
    add(Rule::net_plugin, at, rank);
  } else if (contains(m, "TORCH_NCCL_USE_COMM_NONBLOCKING") && contains(m, "mismatch")) {
    add(Rule::gib_nonblocking, at, rank);
  } else if (contains(m, "Mismatched NCCL version")) {
    add(Rule::version_mismatch, at, rank);
  } else if (contains(m, "mixed local Net device counts")) {
    add(contains(m, "Ignoring") ? Rule::net_mismatch_ignored : Rule::net_mismatch, at, rank);
  } else if (contains(m, "Got completion from peer")) {
    // Two formats: "with error 12, opcode 0, len 0, vendor err 129" and
    // "with status=IBV_WC_RETRY_EXC_ERR(12) ... vendor_err=129".
    std::optional<std::int64_t> status = number_after(m, "with error ");
    if (!status) status = number_after(m, "status=");
    if (!status) {
      std::size_t at_status = find_bytes(m, "status=");
      if (at_status != std::string_view::npos) {
        std::string_view rest = m.substr(at_status);
        status = number_after(rest.substr(0, rest.find(' ')), "(");
      }
    }
    std::optional<std::int64_t> vendor = number_after(m, "vendor err ");
    if (!vendor) vendor = number_after(m, "vendor_err=");
    if (status == 4 || vendor == 81) {
      add(Rule::acs, at, rank);
    } else if (status == 12 || vendor == 129) {
      add(Rule::roce_unreachable, at, rank);
    } else {
      return false;
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
  if (m_slice && m_report.slices.size() < k_max_slices &&
      std::regex_search(m.begin(), m.end(), *m_slice)) {
    ++m_slice_in_file;
    if (m_slice_in_file >= m_report.slices.size())
      m_report.slices.push_back({printable(m, 120), {}});
    return;
  }
  if (contains(m, "couldn't load driver") || contains(m, "no userspace device-specific driver") ||
      (contains(m, "IBVERBS_PRIVATE_") && contains(m, "not found"))) {
    add(Rule::provider_abi, at, rank);
  } else if (contains(m, "cudaHostRegister with IoMemory failed") ||
             contains(m, "GPU cannot map UAR")) {
    add(Rule::ibgda_mapping, at, rank);
  } else if (contains(m, "DeepEP timeout") || contains(m, "DeepEP error: timeout")) {
    add(Rule::deepep_timeout, at, rank);
  } else if (contains(m, "Watchdog caught collective operation timeout")) {
    std::string detail;
    if (auto seq = number_after(m, "SeqNum="); seq) {
      detail = fmt::format("SeqNum={} OpType={}", *seq, printable(word_after(m, "OpType="), 32));
    }
    add(Rule::watchdog_timeout, at, rank, std::move(detail));
  } else if (!is_benign(m)) {
    // NCCL text re-printed by frameworks ("Last error: ...") without its prefix.
    on_problem(m, at, rank);
  }
}

void Analyzer::cross_rank_rules() {
  auto& ranks = m_report.ranks;
  // Values a job must agree on across ranks.
  struct Group {
    std::vector<int> members;
  };
  auto group_by = [&](auto value_of) {
    std::map<std::string, Group> groups;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      std::string v = value_of(ranks[i]);
      if (!v.empty()) groups[v].members.push_back(static_cast<int>(i));
    }
    return groups;
  };
  auto report_split = [&](Rule rule, const std::map<std::string, Group>& groups,
                          std::string_view what, auto evidence_of) {
    if (groups.size() < 2) return;
    // The largest group is "normal"; evidence comes from the others.
    const std::string* majority = nullptr;
    std::size_t best = 0;
    for (const auto& [v, g] : groups) {
      if (g.members.size() > best) best = g.members.size(), majority = &v;
    }
    for (const auto& [v, g] : groups) {
      std::string detail = fmt::format("{}{}{}: {} rank{}", what, what.empty() ? "" : " ", v,
                                       g.members.size(), g.members.size() == 1 ? "" : "s");
      if (&v != majority) {
        detail += fmt::format(" ({}{})", ranks[static_cast<std::size_t>(g.members[0])].label,
                              g.members.size() > 1 ? ", ..." : "");
      }
      Finding& f = m_findings[static_cast<std::size_t>(rule)];
      if (f.spec == nullptr) f.spec = &spec_of(rule);
      if (f.details.size() < k_max_details) f.details.push_back(detail);
      if (&v == majority) continue;
      for (int m : g.members) {
        ++f.count;
        const Evidence& e = evidence_of(ranks[static_cast<std::size_t>(m)]);
        if (f.evidence.size() < k_max_evidence && !e.file.empty()) f.evidence.push_back(e);
        m_finding_ranks[static_cast<std::size_t>(rule)].add(m);
      }
    }
  };
  report_split(Rule::version_mismatch, group_by([](const RankFacts& r) { return r.nccl_version; }),
               "NCCL", [](const RankFacts& r) -> const Evidence& { return r.version_at; });
  report_split(Rule::net_mismatch, group_by([](const RankFacts& r) { return r.network; }),
               "network", [](const RankFacts& r) -> const Evidence& { return r.network_at; });
  report_split(Rule::net_mismatch, group_by([](const RankFacts& r) {
                 return r.net_name.empty()
                            ? std::string()
                            : fmt::format("NET/{} devices {}", r.net_name, r.net_devices.size());
               }),
               "", [](const RankFacts& r) -> const Evidence& { return r.devices_at; });

  for (const auto& c : m_report.communicators) {
    if (c.complete_count >= c.nranks) continue;
    // A rank that logged Init START and stopped is a hang or crash; ranks that
    // logged nothing are most often files left out of the input.
    bool seen_stuck = false;
    for (int r = 0; r < c.nranks; ++r) {
      if (!c.complete[static_cast<std::size_t>(r)] && c.owner[static_cast<std::size_t>(r)] >= 0)
        seen_stuck = true;
    }
    Rule rule = seen_stuck ? Rule::init_incomplete : Rule::init_unseen;
    Finding& f = m_findings[static_cast<std::size_t>(rule)];
    if (f.spec == nullptr) f.spec = &spec_of(rule);
    ++f.count;
    std::string missing;
    int listed = 0, total = 0;
    bool any_pending = false;  // else the communicator's first line stands as evidence
    for (int r = 0; r < c.nranks; ++r) {
      if (c.complete[static_cast<std::size_t>(r)]) continue;
      ++total;
      if (listed >= 16) continue;
      ++listed;
      int owner = c.owner[static_cast<std::size_t>(r)];
      if (!missing.empty()) missing += ", ";
      missing += owner >= 0
                     ? fmt::format("{} ({})", r, ranks[static_cast<std::size_t>(owner)].label)
                     : fmt::format("{} (no log line)", r);
      if (owner >= 0) {
        m_finding_ranks[static_cast<std::size_t>(rule)].add(owner);
      }
      auto pending = c.pending.find(r);
      if (pending != c.pending.end() && f.evidence.size() < k_max_evidence) {
        f.evidence.push_back(pending->second);
        any_pending = true;
      }
    }
    if (total > listed) missing += fmt::format(", and {} more", total - listed);
    if (f.details.size() < k_max_details) {
      f.details.push_back(
          fmt::format("commId {}: {} of {} ranks reached Init COMPLETE; missing rank{} {}",
                      c.comm_id, c.complete_count, c.nranks, total == 1 ? "" : "s", missing));
    }
    if (!any_pending && f.evidence.size() < k_max_evidence) f.evidence.push_back(c.first_at);
  }
}

Report Analyzer::finish() {
  cross_rank_rules();
  // Socket between ranks of one host carries nothing (P2P/SHM do): info only.
  auto socket = static_cast<std::size_t>(Rule::socket_fallback);
  if (m_findings[socket].spec != nullptr) {
    std::string first_host;
    bool one_host = true;
    for (const auto& r : m_report.ranks) {
      if (r.host.empty()) continue;
      if (first_host.empty()) first_host = r.host;
      one_host = one_host && r.host == first_host;
    }
    if (one_host && !first_host.empty()) {
      auto single = static_cast<std::size_t>(Rule::socket_single_host);
      m_findings[single] = std::move(m_findings[socket]);
      m_findings[single].spec = &spec_of(Rule::socket_single_host);
      m_finding_ranks[single] = std::move(m_finding_ranks[socket]);
      m_findings[socket] = Finding{};
    }
  }
  for (std::size_t i = 0; i < m_findings.size(); ++i) {
    Finding& f = m_findings[i];
    if (f.spec == nullptr) continue;
    f.rank_count = m_finding_ranks[i].count;
    for (int r : m_finding_ranks[i].first) {
      if (f.ranks.size() >= 16) break;
      f.ranks.push_back(m_report.ranks[static_cast<std::size_t>(r)].label);
    }
    m_report.findings.push_back(std::move(f));
  }
  std::stable_sort(
      m_report.findings.begin(), m_report.findings.end(),
      [](const Finding& a, const Finding& b) { return a.spec->severity > b.spec->severity; });
  m_report.worst = Severity::info;
  for (const auto& f : m_report.findings)
    m_report.worst = std::max(m_report.worst, f.spec->severity);
  return std::move(m_report);
}

}  // namespace epkit::logs
