// Device lists as NCCL and NVSHMEM read them: NCCL_IB_HCA and
// NCCL_SOCKET_IFNAME (one grammar in NCCL), NVSHMEM_HCA_LIST.
//
// NCCL: an optional leading '^' (exclude what matches), then an optional '='
// (names must match exactly; otherwise each entry is a prefix), then a comma
// list of `name[:port]`. Both marks count only at the very start of the whole
// value; a port that is not a number reads as 0, which no port has. An empty
// list matches everything, so "^" alone excludes every device.
//
// NVSHMEM: an optional leading '^', then `name[:port]` entries matched by exact
// name; '=' has no meaning. An empty list filters nothing.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace epkit::topo {

enum class ListGrammar { nccl, nvshmem };

struct FilterEntry {
  std::string name;
  int port = -1;  // -1: any port
};

struct DeviceFilter {
  ListGrammar grammar = ListGrammar::nccl;
  bool exclude = false;  // leading '^'
  bool exact = false;    // leading '=' (NCCL) or always (NVSHMEM)
  std::vector<FilterEntry> entries;
  /// Spellings the library reads differently from what the writer likely
  /// meant ("'^' inside the list is part of the name ...").
  std::vector<std::string> notes;

  /// Whether this entry names device `name` port `port` (-1: a device without
  /// ports, such as a network interface, for which the entry's port is ignored).
  bool entry_matches(const FilterEntry& entry, std::string_view name, int port = -1) const;
  /// Whether the library would use device `name` port `port`.
  bool selects(std::string_view name, int port = -1) const;
};

DeviceFilter parse_device_filter(std::string_view text, ListGrammar grammar = ListGrammar::nccl);

}  // namespace epkit::topo
