// libFuzzer target for the placement JSON a node reads from its peers: a
// node's placement and index 0's published outcome. Any bytes must decode
// or be refused without a crash; what decodes keeps the promises
// runtime/placement.h makes (every index once, values of address
// characters only).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string_view>

#include "runtime/placement.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

void check_values(const epkit::runtime::Placement& p) {
  for (const auto* value : {&p.addr, &p.node, &p.block, &p.subblock, &p.physical_host}) {
    check(epkit::runtime::check_placement_value("fuzz", *value).ok());
  }
  check(!p.addr.empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  // The first byte picks the job's node count (1..256); the rest is the text.
  int nnodes = 1 + data[0];
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (auto p = epkit::runtime::decode_placement(text, nnodes - 1)) {
    check(p->index >= 0 && p->index < nnodes);
    check_values(*p);
    // What decodes re-encodes and decodes to the same placement.
    auto again = epkit::runtime::decode_placement(epkit::runtime::encode(*p), nnodes - 1);
    check(again.ok() && epkit::runtime::encode(*again) == epkit::runtime::encode(*p));
  }
  auto order = epkit::runtime::decode_outcome(text, nnodes);
  if (order) {
    check(order->nodes.size() == static_cast<std::size_t>(nnodes));
    std::set<int> seen;
    for (const auto& p : order->nodes) {
      check(p.index >= 0 && p.index < nnodes);
      check(seen.insert(p.index).second);  // nnodes distinct in range: every index
      check_values(p);
    }
  } else {
    for (char c : order.error().message) check(static_cast<unsigned char>(c) >= 0x20);
  }
  return 0;
}
