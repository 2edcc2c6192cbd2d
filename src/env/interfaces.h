// Which network interfaces carry traffic between nodes: their addresses
// (IPv6 from /proc/net/if_inet6, IPv4 on the live node only) and the rule
// that rejects loopback, container bridges and link-local-only interfaces.
// nccl.ifname judges NCCL_SOCKET_IFNAME with it and `epkit env` derives it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "host/sysroot.h"

namespace epkit::env {

struct IfAddrs {
  std::vector<std::string> v4;
  int v6_total = 0;
  int v6_link_local = 0;
};

struct AddressBook {
  std::map<std::string, IfAddrs> by_name;
  bool have_v4 = false;
  bool have_v6 = false;
};

AddressBook read_addresses(const host::Sysroot& fs);

/// Why interface `name` is a poor choice between nodes, or "" when it is not.
/// v6_only: NCCL_SOCKET_FAMILY=AF_INET6.
std::string poor_interface(const std::string& name, const AddressBook& book, bool v6_only);

}  // namespace epkit::env
