// The checks of `epkit bench ep` against the reference path: bitwise
// comparisons of host copies, worded as where the first difference is.
#pragma once

#include <string>
#include <vector>

#include "ep_harness/bench/host_copies.h"

namespace epkit::bench::detail {

/// "" when equal; otherwise how many rows differ and the first element that
/// does, so a report says where to look.
std::string compare(const char* name, const HostTensor& engine, const HostTensor& ref);
std::string compare_ints(const char* name, const std::vector<int>& engine,
                         const std::vector<int>& ref);
/// Joins the non-empty messages of a check.
void note(std::string& verdict, const std::string& message);
std::string compare_dispatch(const HostDispatch& e, const HostDispatch& r, bool routing);
std::string compare_combine(const HostCombine& e, const HostCombine& r);

}  // namespace epkit::bench::detail
