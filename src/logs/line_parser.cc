#include "logs/line_parser.h"

#include "logs/text.h"

namespace epkit::logs {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// "[1,3]<stdout>:" (Open MPI --tag-output; PRRTE writes "[nspace@1,3]"):
// `inner` is the text between the brackets, `after` what follows "]".
bool open_mpi_tag(std::string_view inner, std::string_view after, int& rank) {
  std::size_t comma = inner.rfind(',');
  if (comma == std::string_view::npos || !after.starts_with('<')) return false;
  std::string_view digits = inner.substr(comma + 1);
  auto n = parse_uint(digits);
  if (!n || digits.empty() || digits.size() > 7 || std::to_string(*n).size() != digits.size())
    return false;
  std::size_t close = after.find('>');
  if (close == std::string_view::npos || close > 8 || close + 1 >= after.size() ||
      after[close + 1] != ':')
    return false;
  rank = static_cast<int>(*n);
  return true;
}

// "2026-11-24T09:42:05.123Z " and the like (kubectl logs --timestamps).
bool rfc3339_length(std::string_view s, std::size_t& length) {
  if (s.size() < 21 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' ||
      !is_digit(s[0]) || !is_digit(s[11]))
    return false;
  std::size_t space = s.substr(0, 40).find(' ');
  if (space == std::string_view::npos) return false;
  length = space + 1;
  return true;
}

// Strips one launcher prefix from `s`; returns false when there is none.
bool strip_launcher_prefix(std::string_view& s, LineInfo& info) {
  if (s.empty()) return false;
  if (s[0] == '[') {
    std::string_view inner = s.substr(1, 96);
    std::size_t close = inner.find(']');
    if (close == std::string_view::npos) return false;
    inner = inner.substr(0, close);
    std::string_view after = s.substr(close + 2);
    if (inner.starts_with("pod/") && inner.find('/', 4) != std::string_view::npos &&
        after.starts_with(' ')) {
      std::string_view name = inner.substr(4);
      info.pod = name.substr(0, name.find('/'));
      s = after.substr(1);
      return true;
    }
    if (open_mpi_tag(inner, after, info.launcher_rank)) {
      s = after.substr(after.find(':') + 1);
      if (!s.empty() && s[0] == ' ') s.remove_prefix(1);
      return true;
    }
    if (!after.starts_with(':')) return false;
    std::string_view digits;
    if (inner.starts_with("rank"))
      digits = inner.substr(4);
    else if (inner.starts_with("default"))
      digits = inner.substr(7);
    else
      return false;
    auto n = parse_uint(digits);
    if (!n || digits.size() > 7 || std::to_string(*n).size() != digits.size()) return false;
    info.launcher_rank = static_cast<int>(*n);
    s.remove_prefix(close + 3);
    if (!s.empty() && s[0] == ' ') s.remove_prefix(1);
    return true;
  }
  if (is_digit(s[0])) {
    std::size_t length = 0;
    if (rfc3339_length(s, length)) {
      s.remove_prefix(length);
      return true;
    }
    std::size_t i = 0;
    while (i < s.size() && i < 7 && is_digit(s[i])) ++i;
    if (i + 1 < s.size() && s[i] == ':' && s[i + 1] == ' ') {
      info.launcher_rank = static_cast<int>(*parse_uint(s.substr(0, i)));
      s.remove_prefix(i + 2);
      return true;
    }
  }
  return false;
}

Level level_of(std::string_view word) {
  if (word == "INFO") return Level::info;
  if (word == "WARN") return Level::warn;
  if (word == "TRACE") return Level::trace;
  return Level::other;
}

// Fills host, pid, rank_key and cuda_dev from "host:pid:tid [dev]" (`head`
// is the text before " NCCL ").
void parse_nccl_prefix(std::string_view head, LineInfo& info) {
  if (head.empty() || head.back() != ']') return;
  std::size_t open = head.rfind('[');
  if (open == std::string_view::npos || open == 0 || head[open - 1] != ' ') return;
  auto dev = parse_uint(head.substr(open + 1));
  if (!dev || *dev >= 1'000'000) return;
  std::string_view token = head.substr(0, open - 1);
  if (std::size_t space = token.rfind(' '); space != std::string_view::npos) {
    token.remove_prefix(space + 1);
  }
  std::size_t tid_colon = token.rfind(':');
  if (tid_colon == std::string_view::npos || tid_colon == 0) return;
  std::size_t pid_colon = token.rfind(':', tid_colon - 1);
  if (pid_colon == std::string_view::npos || pid_colon == 0) return;
  std::string_view pid = token.substr(pid_colon + 1, tid_colon - pid_colon - 1);
  std::string_view tid = token.substr(tid_colon + 1);
  // Whole numbers only: "[2025-02-11 14:03:51] [3]" is a timestamp, not
  // host 14, pid 03, tid "51]".
  auto digits = [](std::string_view v) {
    if (v.empty() || v.size() > 10) return false;
    for (char c : v) {
      if (!is_digit(c)) return false;
    }
    return true;
  };
  auto pid_value = parse_uint(pid);
  if (!pid_value || !digits(pid) || !digits(tid)) return;
  info.host = token.substr(0, pid_colon);
  info.pid = static_cast<std::int64_t>(*pid_value);
  info.rank_key = token.substr(0, tid_colon);
  info.cuda_dev = static_cast<int>(*dev);
}

}  // namespace

LineInfo parse_line(std::string_view line) {
  LineInfo info;
  std::string_view s = line;
  for (int guard = 0; guard < 4 && strip_launcher_prefix(s, info); ++guard) {
  }
  std::size_t at;
  std::size_t word_size = 5;  // "NCCL "
  if (s.starts_with("NCCL ")) {
    at = 0;
  } else {
    at = find_bytes(s, " NCCL ");
    if (at == std::string_view::npos) {
      // NVSHMEM_DEBUG lines share NCCL's prefix; looked for only in lines
      // that are not NCCL's (the hot path never gets here).
      at = find_bytes(s, " NVSHMEM ");
      if (at == std::string_view::npos) {
        info.message = s;
        return info;
      }
      info.nvshmem = true;
      word_size = 8;
    }
    ++at;  // at "NCCL " / "NVSHMEM "
  }
  std::string_view rest = s.substr(at + word_size);
  std::size_t space = rest.find(' ');
  std::string_view word = rest.substr(0, space);
  info.level = level_of(word);
  if (info.level == Level::other) {
    // "NCCL version ..." printed by frameworks, or prose mentioning NCCL.
    info.level = Level::none;
    info.nvshmem = false;
    info.message = s;
    return info;
  }
  info.message = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
  if (at > 0) {
    std::string_view head = s.substr(0, at - 1);
    // WARN lines carry "FILE:LINE" between "[dev]" and the level (NCCL and
    // NVSHMEM alike), TRACE lines a timestamp too: at most two such words.
    for (int words = 0; words < 2 && !head.empty() && head.back() != ']'; ++words) {
      std::size_t space_at = head.rfind(' ');
      if (space_at == std::string_view::npos) {
        // A pasted line cut before the prefix: "transport/nvls.cc:165 NCCL
        // WARN ...". The word is the source path when it is FILE.EXT:LINE
        // (not a cut "host:pid:tid").
        std::size_t colon = head.rfind(':');
        if (words == 0 && colon != std::string_view::npos && colon + 1 < head.size() &&
            parse_uint(head.substr(colon + 1)) && head.substr(0, colon).find(':') == head.npos &&
            head.substr(0, colon).find('.') != head.npos)
          info.source_path = head;
        break;
      }
      if (words == 0) info.source_path = head.substr(space_at + 1);
      head = head.substr(0, space_at);
    }
    parse_nccl_prefix(head, info);
  }
  return info;
}

}  // namespace epkit::logs
