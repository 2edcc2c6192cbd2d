#include <gtest/gtest.h>

#include "bench/p2p.h"

namespace epkit::bench {
namespace {

TEST(BenchP2p, RendersAMatrixWithMissingPairsAsDashes) {
  P2pMatrix m{CopyMode::sm_bidir, {{0.0, 726.4}, {727.44, 0.0}}};
  std::string text = render_p2p(m);
  EXPECT_NE(text.find("SM copy kernel, bidirectional"), std::string::npos) << text;
  EXPECT_NE(text.find("    GPU0        -    726.4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("    GPU1    727.4        -\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace epkit::bench
