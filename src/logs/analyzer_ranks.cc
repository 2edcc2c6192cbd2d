// The analyser's rank identification: which rank a line belongs to, from the
// launcher's prefix, NCCL's "host:pid:tid" key, or (lines without a prefix)
// the rank DeepEP or NVSHMEM names in the message.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "logs/analyzer.h"
#include "logs/catalogue.h"
#include "logs/text.h"

namespace epkit::logs {
namespace {

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

}  // namespace

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

void Analyzer::RankSet::add(int rank) {
  if (rank < 0) return;
  auto r = static_cast<std::size_t>(rank);
  if (r >= seen.size()) seen.resize(r + 1, false);
  if (seen[r]) return;
  seen[r] = true;
  ++count;
  if (first.size() < k_max_finding_ranks) first.push_back(rank);
}

void Analyzer::rank_from_message(LineInfo& info) {
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
}

}  // namespace epkit::logs
