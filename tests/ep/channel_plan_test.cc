// The rebuilt dispatch's channel counts and receive bases
// (ep/internode/channel_plan.h) against a brute-force order: with random
// routing over 3 nodes of 2 ranks and every channel count from 1 to more
// channels than tokens, every row a receiver gets is placed where global
// source rank order, then token order, puts it; a node's stream carries
// exactly the tokens reaching any of its ranks; hostile counts are refused.
#ifdef EPKIT_WITH_CUDA
#include "ep/internode/channel_plan.h"

#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

namespace epkit::ep::kernels {
namespace {

TEST(ChannelPlan, EveryRowLandsInGlobalSourceRankThenTokenOrder) {
  constexpr int kNodes = 3, kPer = 2, kRanks = kNodes * kPer, kTokens = 37;
  std::mt19937 rng(7);
  // reach[src][t][dst]
  std::vector<std::vector<std::vector<bool>>> reach(
      kRanks, std::vector<std::vector<bool>>(kTokens, std::vector<bool>(kRanks)));
  for (auto& tokens : reach)
    for (auto& dsts : tokens)
      for (std::size_t d = 0; d < dsts.size(); ++d) dsts[d] = rng() % 3 == 0;
  for (int channels : {1, 2, 5, 37, 50}) {
    const ChannelSplit split{kTokens, channels};
    // Every source's counts, per channel.
    std::vector<std::vector<int>> to_node(kRanks * channels, std::vector<int>(kNodes));
    std::vector<std::vector<int>> to_rank(kRanks * channels, std::vector<int>(kRanks));
    for (int s = 0; s < kRanks; ++s) {
      for (int c = 0; c < channels; ++c) {
        const auto i = static_cast<std::size_t>(s * channels + c);
        count_channel(
            split, c, kNodes, kPer,
            [&](int t, int r) {
              return static_cast<bool>(reach[static_cast<std::size_t>(s)][static_cast<std::size_t>(
                  t)][static_cast<std::size_t>(r)]);
            },
            to_node[i].data(), to_rank[i].data());
        int size = channel_begin(split, c + 1) - channel_begin(split, c);
        for (int m = 0; m < kNodes; ++m) {
          int most = 0, stream = 0;
          for (int t = channel_begin(split, c); t < channel_begin(split, c + 1); ++t) {
            bool any = false;
            for (int g = 0; g < kPer; ++g)
              any = any || reach[static_cast<std::size_t>(s)][static_cast<std::size_t>(t)]
                                [static_cast<std::size_t>(m * kPer + g)];
            stream += any;
          }
          for (int g = 0; g < kPer; ++g) most = std::max(most, to_rank[i][m * kPer + g]);
          EXPECT_EQ(to_node[i][static_cast<std::size_t>(m)], stream);
          EXPECT_LE(most, to_node[i][static_cast<std::size_t>(m)]);
          EXPECT_LE(to_node[i][static_cast<std::size_t>(m)], size);
        }
      }
    }
    for (int r = 0; r < kRanks; ++r) {
      // The receiver's view: rows from each (source, channel), then bases.
      std::vector<int> rows(static_cast<std::size_t>(kRanks * channels));
      for (std::size_t i = 0; i < rows.size(); ++i)
        rows[i] = to_rank[i][static_cast<std::size_t>(r)];
      std::vector<int> base(rows.size() + 1);
      ASSERT_TRUE(receive_bases(rows.data(), kRanks, channels, kRanks * kTokens, base.data()));
      // Brute force: global source rank order, then token order.
      int want = 0;
      for (int s = 0; s < kRanks; ++s) {
        std::vector<int> seen(static_cast<std::size_t>(channels), 0);
        for (int t = 0; t < kTokens; ++t) {
          if (!reach[static_cast<std::size_t>(s)][static_cast<std::size_t>(t)]
                    [static_cast<std::size_t>(r)])
            continue;
          const int c = channel_of(split, t);
          const int got = base[static_cast<std::size_t>(s * channels + c)] +
                          seen[static_cast<std::size_t>(c)]++;
          EXPECT_EQ(got, want++) << "channels " << channels << ", rank " << r << ", source " << s
                                 << ", token " << t;
        }
      }
      EXPECT_EQ(base.back(), want);
    }
  }
}

TEST(ChannelPlan, HostileCountsAreRefused) {
  std::vector<int> base(5);
  const std::vector<int> negative = {3, -1, 2, 0};
  EXPECT_FALSE(receive_bases(negative.data(), 2, 2, 100, base.data()));
  const std::vector<int> too_many = {60, 0, 30, 20};
  EXPECT_FALSE(receive_bases(too_many.data(), 2, 2, 100, base.data()));
  const std::vector<int> huge = {0x7fffffff, 0x7fffffff, 1, 1};
  EXPECT_FALSE(receive_bases(huge.data(), 2, 2, 1000, base.data()));
  // A bound past an int does not let the bases overflow.
  EXPECT_FALSE(receive_bases(huge.data(), 2, 2, 1LL << 40, base.data()));
  const std::vector<int> fine = {60, 0, 20, 20};
  ASSERT_TRUE(receive_bases(fine.data(), 2, 2, 100, base.data()));
  EXPECT_EQ(base, (std::vector<int>{0, 60, 60, 80, 100}));
}

TEST(ChannelPlan, ChannelsCoverTheTokensOnceEvenWhenMoreThanTokens) {
  for (int tokens : {0, 1, 7, 4096}) {
    for (int channels : {1, 3, 12, 24}) {
      const ChannelSplit s{tokens, channels};
      EXPECT_EQ(channel_begin(s, 0), 0);
      EXPECT_EQ(channel_begin(s, channels), tokens);
      for (int c = 0; c < channels; ++c) EXPECT_LE(channel_begin(s, c), channel_begin(s, c + 1));
      for (int t = 0; t < tokens; ++t) {
        const int c = channel_of(s, t);
        EXPECT_GE(t, channel_begin(s, c));
        EXPECT_LT(t, channel_begin(s, c + 1));
      }
    }
  }
}

}  // namespace
}  // namespace epkit::ep::kernels
#endif
