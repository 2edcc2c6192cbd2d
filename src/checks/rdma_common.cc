#include "checks/rdma_common.h"

#include <cctype>
#include <charconv>

namespace epkit::checks::rdma {

std::optional<long> parse_integer(std::string_view text) {
  long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

bool truthy(std::string_view value) {
  std::string lower;
  for (char c : value) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "1" || lower == "true" || lower == "yes" || lower == "y" || lower == "on";
}

std::string port_path(const topo::RdmaNic& nic, const topo::IbPort& port, std::string_view leaf) {
  return fmt::format("/sys/class/infiniband/{}/ports/{}/{}", nic.name, port.port, leaf);
}

}  // namespace epkit::checks::rdma
