#include "logs/analyzer.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "logs/catalogue.h"
#include "logs/text.h"

namespace epkit::logs {
namespace {

constexpr std::uint64_t k_binary_sample = 64 * 1024;  // bytes per input checked for binary data

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
  // assign(1, '?'), not = "?": GCC 12 warns a false -Wrestrict on the
  // literal's copy once create() is inlined in a small file.
  a.m_report.unranked.label.assign(1, '?');
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

void Analyzer::feed(std::string_view line, std::uint64_t line_no) {
  ++m_report.lines;
  LineInfo info = parse_line(line);
  rank_from_message(info);
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
