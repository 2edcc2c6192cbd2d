#ifdef EPKIT_WITH_CUDA

#include <gtest/gtest.h>

#include "ep_harness/reference.h"

namespace epkit::harness {
namespace {

TEST(HostLayout, CountsTokensPerRankAndExpert) {
  // 8 experts over 4 ranks (2 each), top-2.
  std::vector<std::int64_t> topk = {
      0,  1,   // token 0: both on rank 0
      2,  7,   // token 1: ranks 1 and 3
      -1, -1,  // token 2: nowhere
      5,  -1,  // token 3: rank 2
  };
  auto l = host_layout(topk, 4, 2, 8, 4);
  ASSERT_TRUE(l.ok()) << l.error().message;
  EXPECT_EQ(l->num_tokens, 4);
  EXPECT_EQ(l->num_ranks, 4);
  EXPECT_EQ(l->num_experts, 8);
  EXPECT_EQ(l->num_tokens_per_rank, (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(l->num_tokens_per_expert, (std::vector<int>{1, 1, 1, 0, 0, 1, 0, 1}));
  EXPECT_EQ(l->is_token_in_rank, (std::vector<std::uint8_t>{1, 0, 0, 0,  //
                                                            0, 1, 0, 1,  //
                                                            0, 0, 0, 0,  //
                                                            0, 0, 1, 0}));
}

TEST(HostLayout, TokenCountsOncePerRankAndExpert) {
  // Two experts of one rank, and one expert listed twice: still one token.
  auto l = host_layout({2, 3, 3}, 1, 3, 4, 2);
  ASSERT_TRUE(l.ok()) << l.error().message;
  EXPECT_EQ(l->num_tokens_per_rank, (std::vector<int>{0, 1}));
  EXPECT_EQ(l->num_tokens_per_expert, (std::vector<int>{0, 0, 1, 1}));
}

TEST(HostLayout, NoTokensAndNoTopk) {
  auto none = host_layout({}, 0, 8, 16, 4);
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_EQ(none->num_tokens_per_rank, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_TRUE(none->is_token_in_rank.empty());
  auto zero_k = host_layout({}, 3, 0, 16, 4);
  ASSERT_TRUE(zero_k.ok()) << zero_k.error().message;
  EXPECT_EQ(zero_k->is_token_in_rank.size(), 12u);
  EXPECT_EQ(zero_k->num_tokens_per_rank, (std::vector<int>{0, 0, 0, 0}));
}

TEST(HostLayout, RejectsUnevenExpertsAndBadIndices) {
  auto uneven = host_layout({0}, 1, 1, 10, 4);
  ASSERT_FALSE(uneven.ok());
  EXPECT_EQ(uneven.error().code, ErrorCode::invalid);
  EXPECT_NE(uneven.error().message.find("10 experts"), std::string::npos);

  auto high = host_layout({0, 8}, 1, 2, 8, 4);
  ASSERT_FALSE(high.ok());
  EXPECT_NE(high.error().message.find("expert 8"), std::string::npos) << high.error().message;

  auto low = host_layout({-2}, 1, 1, 8, 4);
  ASSERT_FALSE(low.ok());
  EXPECT_NE(low.error().message.find("expert -2"), std::string::npos) << low.error().message;

  auto size = host_layout({0, 1, 2}, 2, 2, 8, 4);
  ASSERT_FALSE(size.ok());
  EXPECT_NE(size.error().message.find("3 indices"), std::string::npos) << size.error().message;
}

}  // namespace
}  // namespace epkit::harness

#endif
