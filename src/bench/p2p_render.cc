#include <fmt/format.h>

#include "bench/p2p.h"

namespace epkit::bench {

const char* to_string(CopyMode mode) {
  switch (mode) {
    case CopyMode::ce_unidir: return "copy engine, unidirectional";
    case CopyMode::ce_bidir: return "copy engine, bidirectional";
    case CopyMode::sm_unidir: return "SM copy kernel, unidirectional";
    case CopyMode::sm_bidir: return "SM copy kernel, bidirectional";
  }
  return "?";
}

std::string render_p2p(const P2pMatrix& m) {
  std::string out = fmt::format("{} (GB/s, row = source, column = destination)\n", to_string(m.mode));
  out += fmt::format("{:>8}", "");
  for (std::size_t j = 0; j < m.gbps.size(); ++j) out += fmt::format("{:>9}", fmt::format("GPU{}", j));
  out += "\n";
  for (std::size_t i = 0; i < m.gbps.size(); ++i) {
    out += fmt::format("{:>8}", fmt::format("GPU{}", i));
    for (double v : m.gbps[i]) out += v > 0 ? fmt::format("{:>9.1f}", v) : fmt::format("{:>9}", "-");
    out += "\n";
  }
  return out;
}

}  // namespace epkit::bench
