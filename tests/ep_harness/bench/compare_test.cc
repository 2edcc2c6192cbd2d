// `epkit bench ep`'s comparison of a dispatch with the reference on host
// copies: across nodes the engine has no recv_src_idx and its
// recv_gbl_rank_prefix_sum stands for the rank's column of the reference's
// rank prefix matrix.
#ifdef EPKIT_WITH_CUDA

#include "ep_harness/bench/compare.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace epkit::harness::detail {
namespace {

HostTensor ints(std::vector<std::int32_t> v) {
  HostTensor t;
  t.dtype = DType::int32;
  t.shape = {static_cast<std::int64_t>(v.size())};
  t.bytes.resize(v.size() * 4);
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

// The reference as rank 1 of 4 (2 nodes x 2) sees it: it received 5, 7, 8
// and 6 rows from ranks 0..3 (column 1 of the matrix: 5, 12, 20, 26).
HostDispatch reference() {
  HostDispatch r;
  r.rows = 26;
  r.recv_src_idx = ints(std::vector<std::int32_t>(26, 3));
  r.rank_prefix_matrix = {4,  5,  6,  7,   //
                          9,  12, 10, 11,  //
                          15, 20, 14, 13,  //
                          20, 26, 18, 19};
  r.per_expert = {10, 16};
  return r;
}

// The engine's internode copy: no recv_src_idx, the prefix sum from the
// handle.
HostDispatch internode_engine() {
  HostDispatch e;
  e.rows = 26;
  e.recv_src_idx = ints({});
  e.recv_gbl_rank_prefix_sum = {5, 12, 20, 26};
  e.per_expert = {10, 16};
  return e;
}

TEST(EpBenchCompare, InternodeHoldsThePrefixSumAgainstTheRanksColumn) {
  const Comparer rank1{1, 4, true};
  EXPECT_EQ(compare_dispatch(internode_engine(), reference(), true, rank1), "");
  HostDispatch wrong = internode_engine();
  wrong.recv_gbl_rank_prefix_sum[2] = 19;
  const std::string v = compare_dispatch(wrong, reference(), true, rank1);
  EXPECT_NE(v.find("recv_gbl_rank_prefix_sum"), std::string::npos) << v;
  EXPECT_NE(v.find("first difference at 2 (engine 19, reference 20)"), std::string::npos) << v;
  // The column of another rank is not this rank's.
  EXPECT_NE(compare_dispatch(internode_engine(), reference(), true, {0, 4, true}), "");
}

TEST(EpBenchCompare, IntranodeStillComparesSourceIndicesAndTheMatrix) {
  const Comparer rank1{1, 4, false};
  // The internode copy has neither: an intranode comparison must say so.
  const std::string v = compare_dispatch(internode_engine(), reference(), true, rank1);
  EXPECT_NE(v.find("recv_src_idx"), std::string::npos) << v;
  EXPECT_NE(v.find("rank_prefix_matrix"), std::string::npos) << v;
  HostDispatch same = reference();
  EXPECT_EQ(compare_dispatch(same, reference(), true, rank1), "");
}

}  // namespace
}  // namespace epkit::harness::detail

#endif
