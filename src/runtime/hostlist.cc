#include "runtime/hostlist.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>

namespace epkit::runtime {
namespace {

Error malformed(std::string_view list, std::string_view why) {
  return make_error(ErrorCode::invalid, fmt::format("host list '{}': {}", list, why));
}

bool all_digits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Expands the inside of one bracket pair: "01-03,7" -> 01 02 03 7.
Result<std::vector<std::string>> expand_ranges(std::string_view list, std::string_view body) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= body.size()) {
    std::size_t comma = body.find(',', pos);
    if (comma == std::string_view::npos) comma = body.size();
    std::string_view item = body.substr(pos, comma - pos);
    pos = comma + 1;
    std::size_t dash = item.find('-');
    std::string_view lo_text = item.substr(0, dash);
    std::string_view hi_text = dash == std::string_view::npos ? lo_text : item.substr(dash + 1);
    if (!all_digits(lo_text) || !all_digits(hi_text) || lo_text.size() > 9 || hi_text.size() > 9) {
      return malformed(list, fmt::format("'{}' is not a number or range", item));
    }
    unsigned long lo = 0;
    unsigned long hi = 0;
    std::from_chars(lo_text.data(), lo_text.data() + lo_text.size(), lo);
    std::from_chars(hi_text.data(), hi_text.data() + hi_text.size(), hi);
    if (hi < lo) return malformed(list, fmt::format("range '{}' runs backwards", item));
    if (hi - lo >= k_max_hostlist_hosts || out.size() + (hi - lo) >= k_max_hostlist_hosts) {
      return malformed(list, fmt::format("more than {} hosts", k_max_hostlist_hosts));
    }
    // Slurm pads to the width of the lower bound when it has a leading zero.
    std::size_t width = lo_text.size() > 1 && lo_text.front() == '0' ? lo_text.size() : 0;
    for (unsigned long i = lo; i <= hi; ++i) out.push_back(fmt::format("{:0{}}", i, width));
  }
  return out;
}

// One name with zero or more bracket groups.
Result<std::vector<std::string>> expand_name(std::string_view list, std::string_view name,
                                             std::size_t already) {
  std::vector<std::string> partial{""};
  std::size_t pos = 0;
  while (pos < name.size()) {
    std::size_t open = name.find('[', pos);
    std::string_view literal = name.substr(pos, open == std::string_view::npos ? open : open - pos);
    if (literal.find(']') != std::string_view::npos) return malformed(list, "unbalanced ']'");
    for (auto& p : partial) p += literal;
    if (open == std::string_view::npos) break;
    std::size_t close = name.find(']', open);
    if (close == std::string_view::npos) return malformed(list, "unbalanced '['");
    auto values = expand_ranges(list, name.substr(open + 1, close - open - 1));
    if (!values) return values.error();
    if (partial.size() * values->size() + already > k_max_hostlist_hosts) {
      return malformed(list, fmt::format("more than {} hosts", k_max_hostlist_hosts));
    }
    std::vector<std::string> next;
    next.reserve(partial.size() * values->size());
    for (const auto& p : partial) {
      for (const auto& v : *values) next.push_back(p + v);
    }
    partial = std::move(next);
    pos = close + 1;
  }
  return partial;
}

}  // namespace

Result<std::vector<std::string>> expand_hostlist(std::string_view list) {
  std::vector<std::string> hosts;
  std::size_t start = 0;
  int depth = 0;
  for (std::size_t i = 0; i <= list.size(); ++i) {
    char c = i < list.size() ? list[i] : ',';
    if (c == '[') {
      if (++depth > 1) return malformed(list, "nested '['");
    } else if (c == ']') {
      if (--depth < 0) return malformed(list, "unbalanced ']'");
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      return malformed(list, "whitespace inside the list");
    } else if (c == ',' && depth == 0) {
      std::string_view name = list.substr(start, i - start);
      start = i + 1;
      if (name.empty()) {
        if (i == list.size() && !hosts.empty()) break;  // one trailing comma is harmless
        return malformed(list, "empty name");
      }
      auto names = expand_name(list, name, hosts.size());
      if (!names) return names.error();
      hosts.insert(hosts.end(), names->begin(), names->end());
    }
  }
  if (depth != 0) return malformed(list, "unbalanced '['");
  if (hosts.empty()) return malformed(list, "no hosts");
  return hosts;
}

Result<std::vector<int>> expand_tasks_per_node(std::string_view list) {
  std::vector<int> out;
  std::size_t pos = 0;
  auto bad = [&](std::string_view item) {
    return make_error(ErrorCode::invalid,
                      fmt::format("tasks per node '{}': '{}' is not N or N(xM)", list, item));
  };
  while (pos <= list.size()) {
    std::size_t comma = list.find(',', pos);
    if (comma == std::string_view::npos) comma = list.size();
    std::string_view item = list.substr(pos, comma - pos);
    pos = comma + 1;
    std::string_view count_text = item;
    std::string_view repeat_text = "1";
    if (auto paren = item.find("(x"); paren != std::string_view::npos) {
      if (item.back() != ')') return bad(item);
      count_text = item.substr(0, paren);
      repeat_text = item.substr(paren + 2, item.size() - paren - 3);
    }
    if (!all_digits(count_text) || !all_digits(repeat_text) || count_text.size() > 6 ||
        repeat_text.size() > 6) {
      return bad(item);
    }
    int count = 0;
    int repeat = 0;
    std::from_chars(count_text.data(), count_text.data() + count_text.size(), count);
    std::from_chars(repeat_text.data(), repeat_text.data() + repeat_text.size(), repeat);
    if (count == 0 || repeat == 0) return bad(item);
    if (out.size() + static_cast<std::size_t>(repeat) > k_max_hostlist_hosts) return bad(item);
    out.insert(out.end(), static_cast<std::size_t>(repeat), count);
  }
  return out;
}

}  // namespace epkit::runtime
