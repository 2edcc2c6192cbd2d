#include "runtime/nccl_transports.h"

#include <gtest/gtest.h>

namespace epkit::runtime {
namespace {

TEST(NcclTransports, ReadsChannelLinesOfEachTransport) {
  auto t = parse_transports(
      "h1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
      "h1:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
      "h1:1:2 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/0/GDRDMA\n"
      "h1:1:2 [0] NCCL INFO Channel 00/0 : 3[3] -> 0[0] via SHM/direct/direct\n"
      "h1:1:2 [0] NCCL INFO Channel 02/0 : 3[3] -> 0[0] via P2P/IPC\n"
      "h1:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 4 - Init COMPLETE\n");
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t.at({1, 2}), "NET/IB/0/GDRDMA");
  EXPECT_EQ(t.at({0, 1}), "P2P/CUMEM/read");
  EXPECT_EQ(t.at({3, 0}), "SHM/direct/direct, P2P/IPC");
}

TEST(NcclTransports, IgnoresMalformedLines) {
  PeerTransports t;
  EXPECT_FALSE(parse_transport_line("NCCL INFO Channel 00/0 : x[0] -> 1[1] via P2P", t));
  EXPECT_FALSE(parse_transport_line("NCCL INFO Channel 00/0 : 0[0] -> 1[1 via P2P", t));
  EXPECT_FALSE(parse_transport_line("NCCL INFO Channel 00/0 : 0[0] -> 1[1] via ", t));
  EXPECT_FALSE(parse_transport_line("NCCL INFO Ring 00 : 0 1", t));
  EXPECT_TRUE(t.empty());
}

}  // namespace
}  // namespace epkit::runtime
