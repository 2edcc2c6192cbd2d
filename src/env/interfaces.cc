#include "env/interfaces.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <memory>
#include <sstream>

namespace epkit::env {

AddressBook read_addresses(const host::Sysroot& fs) {
  AddressBook book;
  if (auto text = fs.read("/proc/net/if_inet6")) {
    book.have_v6 = true;
    std::istringstream lines(*text);
    std::string addr, index, prefix, scope, flags, name;
    while (lines >> addr >> index >> prefix >> scope >> flags >> name) {
      auto& entry = book.by_name[name];
      ++entry.v6_total;
      if (scope == "20") ++entry.v6_link_local;
    }
  }
  if (fs.is_live()) {
    struct ifaddrs* list = nullptr;
    if (::getifaddrs(&list) == 0) {
      std::unique_ptr<struct ifaddrs, void (*)(struct ifaddrs*)> guard(list, ::freeifaddrs);
      book.have_v4 = true;
      for (auto* it = list; it != nullptr; it = it->ifa_next) {
        if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
        char text[INET_ADDRSTRLEN] = {};
        auto* sin = reinterpret_cast<struct sockaddr_in*>(it->ifa_addr);
        ::inet_ntop(AF_INET, &sin->sin_addr, text, sizeof text);
        book.by_name[it->ifa_name].v4.emplace_back(text);
      }
    }
  }
  return book;
}

// Why an interface NCCL would use is a poor choice between nodes, or "".
std::string poor_interface(const std::string& name, const AddressBook& book, bool v6_only) {
  if (name == "lo") return "the loopback interface";
  for (std::string_view prefix : {"docker", "veth", "virbr"}) {
    if (std::string_view(name).starts_with(prefix)) {
      return fmt::format("a {}* interface (container or VM bridge, not routed between nodes)",
                         prefix);
    }
  }
  auto it = book.by_name.find(name);
  if (it == book.by_name.end()) return {};
  const IfAddrs& a = it->second;
  bool v4_link_local_only = !a.v4.empty();
  for (const auto& ip : a.v4) v4_link_local_only = v4_link_local_only && ip.starts_with("169.254.");
  bool v6_link_local_only = a.v6_total > 0 && a.v6_link_local == a.v6_total;
  // Link-local only: no routable address of the family NCCL will use.
  if (book.have_v4 && !v6_only) {
    if ((a.v4.empty() && v6_link_local_only) || v4_link_local_only) {
      return "an interface with link-local addresses only (169.254/16, fe80::/10)";
    }
  } else if (v6_only && v6_link_local_only) {
    return "an interface with link-local IPv6 addresses only (fe80::/10)";
  }
  return {};
}

}  // namespace epkit::env
