#include "topo/device_filter.h"

#include <fmt/format.h>

#include <cctype>

namespace epkit::topo {
namespace {

// atoi(): leading blanks, a sign, digits; anything else ends the number and
// no digit at all reads as 0. Both libraries parse ports this way.
int c_atoi(std::string_view text, bool* clean) {
  std::size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  long value = 0;
  std::size_t digits = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) && value < 1000000) {
    value = value * 10 + (text[i++] - '0');
    ++digits;
  }
  *clean = digits > 0 && i == text.size();
  return static_cast<int>(negative ? -value : value);
}

void note_odd_name(DeviceFilter& filter, const std::string& name) {
  if (name.find_first_of(" \t") != std::string::npos) {
    filter.notes.push_back(fmt::format(
        "entry '{}' contains a blank, which the library keeps as part of the name", name));
  }
  // The marks were taken off the start of the list already, so one here is a
  // literal character of the name.
  if (name.front() == '^' || name.front() == '=') {
    filter.notes.push_back(fmt::format(
        "entry '{}' starts with '{}', which is a mark only at the start of the whole list{}; "
        "here it is part of the name",
        name, name.front(),
        filter.grammar == ListGrammar::nvshmem && name.front() == '=' ? " (and NVSHMEM has no '=')"
                                                                      : ""));
  }
}

}  // namespace

bool DeviceFilter::entry_matches(const FilterEntry& entry, std::string_view name, int port) const {
  bool name_ok = exact ? name == entry.name : name.starts_with(entry.name);
  if (!name_ok) return false;
  return port == -1 || entry.port == -1 || entry.port == port;
}

bool DeviceFilter::selects(std::string_view name, int port) const {
  if (entries.empty()) {
    // NCCL: an empty list matches everything, then '^' inverts it.
    return grammar == ListGrammar::nvshmem || !exclude;
  }
  bool matched = false;
  for (const auto& entry : entries) matched = matched || entry_matches(entry, name, port);
  return matched != exclude;
}

DeviceFilter parse_device_filter(std::string_view text, ListGrammar grammar) {
  DeviceFilter filter;
  filter.grammar = grammar;
  if (!text.empty() && text.front() == '^') {
    filter.exclude = true;
    text.remove_prefix(1);
  }
  if (grammar == ListGrammar::nccl) {
    if (!text.empty() && text.front() == '=') {
      filter.exact = true;
      text.remove_prefix(1);
    }
  } else {
    filter.exact = true;
  }
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(pos, comma - pos);
    pos = comma + 1;
    std::size_t colon = item.find(':');
    std::string name(item.substr(0, colon));
    if (name.empty()) continue;  // both libraries skip empty entries (and ":1")
    FilterEntry entry;
    entry.name = name;
    if (colon != std::string_view::npos) {
      std::string_view port_text = item.substr(colon + 1);
      // NCCL ignores everything after the port; NVSHMEM reads a third field as a count.
      port_text = port_text.substr(0, port_text.find(':'));
      bool clean = false;
      entry.port = c_atoi(port_text, &clean);
      if (!clean) {
        filter.notes.push_back(fmt::format("entry '{}': port '{}' is not a number; it reads as {}",
                                           item, port_text, entry.port));
      }
    }
    note_odd_name(filter, name);
    filter.entries.push_back(std::move(entry));
  }
  return filter;
}

}  // namespace epkit::topo
