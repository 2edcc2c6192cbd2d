// The checks of `epkit bench ep` against the reference path: bitwise
// comparisons of host copies, worded as where the first difference is.
#pragma once

#include <string>
#include <vector>

#include "ep_harness/bench/host_copies.h"

namespace epkit::harness::detail {

/// "" when equal; otherwise how many rows differ and the first element that
/// does, so a report says where to look.
std::string compare(const char* name, const HostTensor& engine, const HostTensor& ref);
std::string compare_ints(const char* name, const std::vector<int>& engine,
                         const std::vector<int>& ref);
/// Joins the non-empty messages of a check.
void note(std::string& verdict, const std::string& message);
/// Which rank compares, of how many, and whether the Buffer spans nodes.
struct Comparer {
  int rank = 0;
  int ranks = 1;
  bool internode = false;
};
/// Across nodes the engine has no recv_src_idx, and its
/// recv_gbl_rank_prefix_sum is held against this rank's column of the
/// reference's rank prefix matrix; otherwise the whole matrix is compared.
std::string compare_dispatch(const HostDispatch& e, const HostDispatch& r, bool routing,
                             const Comparer& who);
std::string compare_combine(const HostCombine& e, const HostCombine& r);

}  // namespace epkit::harness::detail
