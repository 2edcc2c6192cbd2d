// One conformance case: what the suite (ep_harness/conformance.cc) runs and
// checks. Each engine mode lists its cases in its own file here
// (intranode.cc, low_latency.cc); the suite runs them in order on every rank.
#pragma once

#ifdef EPKIT_WITH_CUDA

#include <string>
#include <vector>

#include "ep_harness/conformance.h"
#include "ep_harness/testdata.h"

namespace epkit::harness {

struct CaseSpec {
  std::string name;
  bool layout_only = false;
  XKind kind = XKind::random;
  bool fp8 = false;
  bool with_topk = true;
  bool previous = false;
  bool async = false;
  int hidden = 0;
  int alignment = 1;
  bool topk32 = false;
  int zero_tokens_rank = -1;
  int masked_rank = -1;  // 1.0 of its slots masked, 0.3 on the other ranks
  int only_rank = -1;
  /// Where the combine reads its input: the dispatch's recv_x (in the
  /// Buffer), a copy outside the Buffer (the engine stages it), or a copy
  /// written into Buffer::combine_input().
  enum class CombineFrom { recv_x, outside, combine_input } combine_from = CombineFrom::recv_x;
  /// Biases the combine starts from (0, 1 or 2: CombineArgs::bias).
  int biases = 0;
  /// The combine writes into caller memory (CombineArgs::out_x and
  /// out_topk_weights) instead of the Buffer's.
  bool combine_into_caller = false;
};

/// The normal (intranode, NVLink) mode: the layout check, DeepEP's
/// test_intranode.py sweep in its order, then the edge cases.
std::vector<CaseSpec> intranode_cases(const ConformanceOptions& o, int ranks);

/// A low-latency case: two dispatches (checked, and equal run to run), then
/// a combine from a tensor into `out` and a zero-copy combine into the
/// Buffer, both checked.
struct LowLatencyCase {
  std::string name;
  bool rank_constant = true;  // DeepEP's x; otherwise N(0, 1) * 0.1
  bool hook = false;          // return_recv_hook (else async, as DeepEP's test)
  bool fp8 = false;
  bool round_scale = false;
  bool ue8m0 = false;
  bool topk32 = false;
  int zero_tokens_rank = -1;
  int masked_rank = -1;  // every selection of this rank is -1
  /// Two dispatches, then two combines, each pair in flight together with
  /// hooks called afterwards (two micro-batches).
  bool two_in_flight = false;
  bool clean_first = false;  // clean_low_latency_buffer before the case
};

/// The low-latency mode: DeepEP's test_low_latency.py sweep (x, hook, BF16 /
/// FP8 / round_scale / UE8M0), then the edge cases.
std::vector<LowLatencyCase> low_latency_cases(const ConformanceOptions& o, int ranks);

}  // namespace epkit::harness

#endif
