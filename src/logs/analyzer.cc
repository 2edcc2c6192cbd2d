#include "logs/analyzer.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "logs/catalogue.h"
#include "logs/text.h"

namespace epkit::logs {
namespace {

constexpr std::uint64_t k_binary_sample = 64 * 1024;  // bytes per input checked for binary data

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

// The PE in "...:LINE: [3] message" (what follows an NVSHMEM source path), or -1.
int nvshmem_pe(std::string_view after_path) {
  std::size_t open = after_path.substr(0, 64).find(": [");
  if (open == std::string_view::npos) return -1;
  std::string_view digits = after_path.substr(open + 3);
  std::size_t close = digits.find(']');
  if (close == std::string_view::npos || close == 0 || close > 7) return -1;
  auto n = parse_uint(digits.substr(0, close));
  if (!n || std::to_string(*n).size() != close) return -1;
  return static_cast<int>(*n);
}

// The rank a DeepEP message names, or -1.
int deepep_rank(std::string_view m) {
  for (std::string_view key : {"Global rank: ", "rank = ", "rank: ", ", rank "}) {
    auto n = number_after(m, key);
    if (n && *n >= 0 && *n < (1 << 20)) return static_cast<int>(*n);
  }
  return -1;
}

// "/build/nvshmem/src/host/init/init.cu:1020: non-zero status: 7 ..." or
// ".../init.cu:nvshmemi_common_init:1020: ...": the path before the line
// number, or "" when the line does not start that way.
std::string_view source_path_of(std::string_view m) {
  std::string_view head = m.substr(0, 256);
  for (std::string_view ext : {".cpp:", ".cu:", ".h:", ".cuh:", ".c:", ".hpp:"}) {
    std::size_t at = find_bytes(head, ext);
    if (at == std::string_view::npos) continue;
    std::string_view path = head.substr(0, at + ext.size() - 1);
    if (path.find(' ') != std::string_view::npos) continue;
    return path;
  }
  return {};
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
  if (no_log_at_all()) return 64;
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

std::string Report::rank_label(int rank) const {
  if (rank < 0 || static_cast<std::size_t>(rank) >= ranks.size()) return "?";
  return ranks[static_cast<std::size_t>(rank)].label;
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
    re2::RE2::Options re_options;
    re_options.set_log_errors(false);
    // Bounded memory for the compiled program and its DFA cache; a pattern
    // that needs more is refused at compile time or runs on the slower NFA.
    re_options.set_max_mem(std::int64_t{64} << 20);
    auto re = std::make_unique<re2::RE2>(options.slice_regex, re_options);
    if (!re->ok()) {
      return make_error(ErrorCode::invalid,
                        fmt::format("--slice '{}': not a regular expression ({})",
                                    printable(options.slice_regex, 200), re->error()));
    }
    a.m_slice = std::move(re);
    a.m_report.sliced = true;
    a.m_report.slices.push_back({});
  }
  a.m_report.unranked.label = "?";
  return a;
}

void Analyzer::begin_file(const std::string& name) {
  if (m_in_file) end_file();
  m_in_file = true;
  m_file_lines = m_file_text_lines = m_file_log_lines = 0;
  m_file_sampled = m_file_bad_bytes = m_file_nul_bytes = 0;
  m_file_binary = false;
  m_file_nvshmem = false;
  m_after_last_error = false;
  m_file = name;
  m_report.files.push_back(name);
  m_slice_in_file = 0;
  m_last_rank = -1;
  m_last_key.clear();
}

Evidence Analyzer::evidence(Location at, int rank) const {
  return {m_file, at.line_no, printable(at.line), rank};
}

// A file is a log when one line is NCCL, NVSHMEM or DeepEP text or matched a
// rule; binary content wins over a chance match (libnccl.so holds "NCCL WARN").
void Analyzer::end_file() {
  m_in_file = false;
  // Mostly non-text is binary even with a chance "NCCL WARN" in it; a log
  // with a NUL-padded tail (a node that died mid-write) is still a log.
  bool binary = m_file_binary || looks_binary();
  NotLogFile note{m_file, NotLog::binary, {}};
  if (binary) {
    note.reason = fmt::format(
        "{}: binary data, not a log ({} NUL and {} invalid UTF-8 bytes in the first {} KiB)",
        m_file, m_file_nul_bytes, m_file_bad_bytes - m_file_nul_bytes,
        (std::min<std::uint64_t>(m_file_sampled, k_binary_sample) + 1023) / 1024);
  } else if (m_file_log_lines > 0) {
    return;
  } else if (m_file_text_lines == 0) {
    note.kind = NotLog::empty;
    note.reason = m_file_lines == 0 ? fmt::format("{}: empty file, no log in it", m_file)
                                    : fmt::format("{}: only blank lines, no log in it", m_file);
  } else {
    note.kind = NotLog::no_log_lines;
    note.reason = fmt::format("no NCCL/NVSHMEM/DeepEP line found in {} ({} line{} of other text)",
                              m_file, m_file_text_lines, m_file_text_lines == 1 ? "" : "s");
  }
  m_report.not_logs.push_back(std::move(note));
}

bool Analyzer::looks_binary() const {
  return m_file_sampled > 0 && (m_file_bad_bytes * 2 > m_file_sampled ||
                                (m_file_log_lines == 0 &&
                                 (m_file_nul_bytes > 0 || m_file_bad_bytes * 10 > m_file_sampled)));
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
  ++m_adds;
  if (rank < 0) ++f.unranked;
  if (f.evidence.size() < k_max_evidence) f.evidence.push_back(evidence(at, rank));
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
  if (info.level == Level::none && info.rank_key.empty() && info.launcher_rank < 0) {
    // DeepEP names the rank in the message ("..., rank 3, ...", "rank: 3/16",
    // "rank = 3"), NVSHMEM's error macros the PE ("FILE:FUNC:LINE: [3] ...");
    // lines without a launcher prefix fold by it.
    if (contains(info.message, "DeepEP")) {
      info.launcher_rank = deepep_rank(info.message);
    } else if (std::string_view path = source_path_of(info.message); !path.empty()) {
      info.launcher_rank = nvshmem_pe(info.message.substr(path.size()));
    }
  }
  int rank = rank_of(info);
  if (rank >= 0) {
    ++m_report.ranks[static_cast<std::size_t>(rank)].lines;
  } else if (!info.rank_key.empty() || info.launcher_rank >= 0) {
    ++m_report.unattributed_lines;
  } else {
    ++m_report.unranked.lines;
  }
  Location at{line, line_no};
  ++m_file_lines;
  if (m_file_sampled < k_binary_sample) {
    NonText bad = count_non_text(line);
    m_file_sampled += line.size() + 1;
    m_file_nul_bytes += bad.nul;
    m_file_bad_bytes += bad.nul + bad.invalid;
    // The verdict is taken on the sample: a binary input is not read on
    // (nor inflated) past it.
    if (m_file_sampled >= k_binary_sample && looks_binary()) m_file_binary = true;
  }
  if (info.level == Level::none) {
    std::uint64_t adds = m_adds;
    on_other(info, at, rank);
    if (m_file_log_lines == 0) {
      // Until the first log line: is this input a log at all?
      std::string_view m = info.message;
      if (!trim(m).empty()) ++m_file_text_lines;
      if (m_adds != adds || contains(m, "NCCL") || contains(m, "NVSHMEM") ||
          contains(m, "nvshmem") || contains(m, "DeepEP"))
        ++m_file_log_lines;
    }
  } else {
    ++m_file_log_lines;
    on_nccl(info, at, rank);
  }
}

RankFacts* Analyzer::facts_of(const LineInfo& info, int rank) {
  if (rank >= 0) return &m_report.ranks[static_cast<std::size_t>(rank)];
  // Lines of ranks beyond k_max_ranks are not "unknown": they are dropped.
  if (info.rank_key.empty() && info.launcher_rank < 0) return &m_report.unranked;
  return nullptr;
}

HostFacts* Analyzer::host_named(std::string_view name) {
  if (name.empty()) return nullptr;
  auto it = m_host_index.find(name);
  if (it != m_host_index.end()) return &m_report.hosts[static_cast<std::size_t>(it->second)];
  if (m_report.hosts.size() >= k_max_hosts) return nullptr;
  m_host_index.emplace(std::string(name), static_cast<int>(m_report.hosts.size()));
  m_report.hosts.push_back({});
  m_report.hosts.back().name = printable(name, 128);
  return &m_report.hosts.back();
}

// Only fact lines look their host up: the hot path (COLL lines) never does.
HostFacts* Analyzer::host_of(const LineInfo& info) {
  return host_named(info.host.empty() ? info.pod : info.host);
}

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

std::array<bool, 3> Analyzer::cross_rank_rules() {
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
    if (groups.size() < 2) return false;
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
    return true;
  };
  std::array<bool, 3> split{};
  split[0] = report_split(Rule::version_mismatch,
                          group_by([](const RankFacts& r) { return r.nccl_version; }), "NCCL",
                          [](const RankFacts& r) -> const Evidence& { return r.version_at; });
  split[1] =
      report_split(Rule::net_mismatch, group_by([](const RankFacts& r) { return r.network; }),
                   "network", [](const RankFacts& r) -> const Evidence& { return r.network_at; });
  split[2] = report_split(Rule::net_mismatch, group_by([](const RankFacts& r) {
                            return r.net_name.empty() ? std::string()
                                                      : fmt::format("NET/{} devices {}", r.net_name,
                                                                    r.net_devices.size());
                          }),
                          "", [](const RankFacts& r) -> const Evidence& { return r.devices_at; });

  for (const auto& c : m_report.communicators) {
    if (c.complete_count >= c.nranks) continue;
    // A rank that logged Init START and stopped is a hang or crash; ranks that
    // logged nothing are most often files left out of the input.
    bool seen_stuck = false;
    for (int r = 0; r < c.nranks; ++r) {
      auto i = static_cast<std::size_t>(r);
      if (!c.complete[i] && (c.owner[i] >= 0 || c.unranked_seen[i])) seen_stuck = true;
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
      if (owner >= 0) {
        missing += fmt::format("{} ({})", r, ranks[static_cast<std::size_t>(owner)].label);
      } else if (c.unranked_seen[static_cast<std::size_t>(r)]) {
        missing += fmt::format("{} (rank ?: its lines have no rank prefix)", r);
      } else {
        missing += fmt::format("{} (no log line)", r);
      }
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
  return split;
}

// Hosts compared fact by fact, whether or not their lines name ranks. Where
// the per-rank comparison already split on a fact it has said so (with rank
// labels); the host view adds what ranks cannot show: plugin loading and
// lines without a rank.
void Analyzer::cross_host_rules(const std::array<bool, 3>& rank_split) {
  const auto& hosts = m_report.hosts;
  if (hosts.size() < 2) return;
  struct Fact {
    Rule rule;
    std::string_view what;
    const std::string HostFacts::*value;
    const Evidence HostFacts::*at;
    bool skip;
    bool loaded_only;  // compare only hosts that loaded an external plugin
  };
  const Fact facts[] = {
      {Rule::host_version, "NCCL", &HostFacts::nccl_version, &HostFacts::version_at, rank_split[0],
       false},
      {Rule::host_plugin, "NET plugin", &HostFacts::plugin, &HostFacts::plugin_at, false, false},
      // Where no plugin loaded, the library tried is the default name: the
      // loaded-or-not comparison above already tells those hosts apart.
      {Rule::host_plugin, "NET plugin library", &HostFacts::plugin_path, &HostFacts::path_at, false,
       true},
      {Rule::host_net, "network", &HostFacts::network, &HostFacts::network_at, rank_split[1],
       false},
      {Rule::host_net, "NET devices", &HostFacts::net_devices, &HostFacts::devices_at,
       rank_split[2], false},
  };
  for (const auto& fact : facts) {
    if (fact.skip) continue;
    std::map<std::string, std::vector<std::size_t>> groups;
    for (std::size_t i = 0; i < hosts.size(); ++i) {
      const std::string& v = hosts[i].*fact.value;
      if (fact.loaded_only && !hosts[i].plugin.starts_with("external")) continue;
      if (!v.empty()) groups[v].push_back(i);
    }
    if (groups.size() < 2) continue;
    Finding f;
    f.spec = &spec_of(fact.rule);
    // Smaller sides first: they are the likely odd ones out.
    std::vector<const std::pair<const std::string, std::vector<std::size_t>>*> sides;
    for (const auto& g : groups) sides.push_back(&g);
    std::stable_sort(sides.begin(), sides.end(),
                     [](auto* a, auto* b) { return a->second.size() < b->second.size(); });
    for (const auto* side : sides) {
      std::vector<std::string> names;
      for (std::size_t i : side->second) {
        if (names.size() < 8) names.push_back(hosts[i].name);
        if (f.hosts.size() < k_max_finding_ranks) f.hosts.push_back(hosts[i].name);
      }
      std::string who = join(names, ", ");
      if (side->second.size() > names.size())
        who += fmt::format(", +{} more", side->second.size() - names.size());
      if (f.details.size() < k_max_details) {
        f.details.push_back(fmt::format("{} {}: {} host{} ({})", fact.what, side->first,
                                        side->second.size(), side->second.size() == 1 ? "" : "s",
                                        who));
      }
      const Evidence& e = hosts[side->second.front()].*fact.at;
      if (f.evidence.size() < k_max_evidence && !e.file.empty()) f.evidence.push_back(e);
    }
    for (std::size_t i = 0; i + 1 < sides.size(); ++i) f.count += sides[i]->second.size();
    m_report.findings.push_back(std::move(f));
  }
}

// An RDMA device NCCL could not open is the usual cause of a NET device count
// that differs between ranks or hosts: where both are seen, the device
// finding says so (as an error) and the mismatch names the devices.
void Analyzer::tie_unopenable_devices() {
  auto open_slot = static_cast<std::size_t>(Rule::ib_open_failed);
  Finding& open_failed = m_findings[open_slot];
  if (open_failed.spec == nullptr) return;
  Finding* mismatch = nullptr;
  auto net_slot = static_cast<std::size_t>(Rule::net_mismatch);
  if (m_findings[net_slot].spec != nullptr) mismatch = &m_findings[net_slot];
  for (auto& f : m_report.findings) {
    if (mismatch == nullptr && f.spec->rule == Rule::host_net) mismatch = &f;
  }
  if (mismatch == nullptr) return;
  if (mismatch->details.size() < k_max_details) {
    std::string devices = join(open_failed.details, ", ");
    mismatch->details.push_back(fmt::format(
        "RDMA device{} that could not be opened: {} (nccl.ib-device-unopenable)",
        open_failed.details.size() == 1 ? "" : "s", devices.empty() ? "see below" : devices));
  }
  auto tied = static_cast<std::size_t>(Rule::ib_open_failed_mismatch);
  m_findings[tied] = std::move(open_failed);
  m_findings[tied].spec = &spec_of(Rule::ib_open_failed_mismatch);
  m_finding_ranks[tied] = std::move(m_finding_ranks[open_slot]);
  m_findings[open_slot] = Finding{};
}

// A transport one PE skipped and another uses: ranks whose NVSHMEM skipped a
// device or the RDMA transport, beside ranks whose NVSHMEM ran without that.
// The skip findings then become this one, which names both sides.
void Analyzer::nvshmem_transport_split() {
  if (m_family_findings.empty()) return;
  std::vector<std::size_t> slots;
  for (std::string_view id : {"nvshmem.hca-skipped", "nvshmem.peer-memory"}) {
    int f = family_index(id);
    if (f >= 0 && m_family_findings[static_cast<std::size_t>(f)].spec != nullptr)
      slots.push_back(static_cast<std::size_t>(f));
  }
  if (slots.empty()) return;
  std::vector<bool> skipped(m_report.ranks.size(), false);
  for (std::size_t slot : slots) {
    const auto& seen = m_family_ranks[slot].seen;
    for (std::size_t r = 0; r < seen.size() && r < skipped.size(); ++r)
      skipped[r] = skipped[r] || seen[r];
  }
  std::vector<std::string> skipping, using_it;
  for (std::size_t r = 0; r < m_report.ranks.size(); ++r) {
    if (!m_report.ranks[r].nvshmem) continue;
    (skipped[r] ? skipping : using_it).push_back(m_report.ranks[r].label);
  }
  if (skipping.empty() || using_it.empty()) return;
  auto slot = static_cast<std::size_t>(Rule::nvshmem_transport_split);
  Finding& split = m_findings[slot];
  split.spec = &spec_of(Rule::nvshmem_transport_split);
  auto side = [](const std::vector<std::string>& v) {
    std::vector<std::string> head(
        v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(v.size(), 6)));
    return join(head, ", ") +
           (v.size() > head.size() ? fmt::format(", +{} more", v.size() - head.size()) : "");
  };
  split.details.push_back(fmt::format("skipped by {} rank{}: {}", skipping.size(),
                                      skipping.size() == 1 ? "" : "s", side(skipping)));
  split.details.push_back(fmt::format("not skipped by {} rank{}: {}", using_it.size(),
                                      using_it.size() == 1 ? "" : "s", side(using_it)));
  for (std::size_t fam : slots) {
    Finding& f = m_family_findings[fam];
    split.count += f.count;
    split.unranked += f.unranked;
    for (auto& e : f.evidence)
      if (split.evidence.size() < k_max_evidence) split.evidence.push_back(std::move(e));
    for (auto& d : f.details)
      if (split.details.size() < k_max_details) split.details.push_back(std::move(d));
    for (std::size_t r = 0; r < m_family_ranks[fam].seen.size(); ++r)
      if (m_family_ranks[fam].seen[r]) m_finding_ranks[slot].add(static_cast<int>(r));
    f = Finding{};
  }
}

Report Analyzer::finish() {
  if (m_in_file) end_file();
  std::array<bool, 3> rank_split = cross_rank_rules();
  cross_host_rules(rank_split);
  tie_unopenable_devices();
  nvshmem_transport_split();
  if (!m_deepep_waited.empty() && m_findings[static_cast<std::size_t>(Rule::deepep_timeout)].spec) {
    // The peers others waited on that reported no timeout themselves are
    // the ones that stopped: name them first.
    Finding& f = m_findings[static_cast<std::size_t>(Rule::deepep_timeout)];
    std::vector<std::string> silent, also;
    for (auto [peer, times] : m_deepep_waited) {
      std::string text = fmt::format("rank {} ({} wait{})", peer, times, times == 1 ? "" : "s");
      (m_deepep_reporters.count(peer) ? also : silent).push_back(std::move(text));
    }
    if (!silent.empty() && f.details.size() < k_max_details) {
      f.details.push_back(fmt::format(
          "waited on, with no timeout of their own (look there first): {}", join(silent, ", ")));
    }
    if (!also.empty() && f.details.size() < k_max_details)
      f.details.push_back(fmt::format("waited on, timed out too: {}", join(also, ", ")));
  }
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
  // Findings with their ranks' labels: the rules' table, then the catalogue's.
  auto emit = [this](Finding& f, const RankSet& ranks) {
    if (f.spec == nullptr) return;
    f.rank_count = ranks.count;
    for (int r : ranks.first) {
      if (f.ranks.size() >= 16) break;
      f.ranks.push_back(m_report.ranks[static_cast<std::size_t>(r)].label);
    }
    m_report.findings.push_back(std::move(f));
  };
  for (std::size_t i = 0; i < m_findings.size(); ++i) emit(m_findings[i], m_finding_ranks[i]);
  for (std::size_t i = 0; i < m_family_findings.size(); ++i)
    emit(m_family_findings[i], m_family_ranks[i]);
  std::stable_sort(
      m_report.findings.begin(), m_report.findings.end(),
      [](const Finding& a, const Finding& b) { return a.spec->severity > b.spec->severity; });
  m_report.worst = Severity::info;
  for (const auto& f : m_report.findings)
    m_report.worst = std::max(m_report.worst, f.spec->severity);
  return std::move(m_report);
}

}  // namespace epkit::logs
