// The intranode (normal mode) conformance cases: DeepEP V1's
// test_intranode.py sweep and the edge cases epkit adds.
#include <fmt/format.h>

#include <algorithm>

#include "ep_harness/conformance/case.h"

namespace epkit::harness {
namespace {

std::string bool_text(bool b) {
  return b ? "True" : "False";
}

}  // namespace

std::vector<CaseSpec> intranode_cases(const ConformanceOptions& o, int ranks) {
  std::vector<CaseSpec> cases;
  const int hidden = o.shape.hidden;
  CaseSpec layout;
  layout.name = "[layout] get_dispatch_layout vs the host layout";
  layout.layout_only = true;
  layout.hidden = hidden;
  cases.push_back(layout);
  // DeepEP's sweep, in its order.
  int n = 0;
  for (bool previous : {false, true}) {
    for (bool async : {false, true}) {
      for (int x = 0; x < 3; ++x) {
        for (bool with_topk : {false, true}) {
          CaseSpec c;
          c.previous = previous;
          c.async = async;
          c.with_topk = with_topk;
          c.hidden = hidden;
          c.fp8 = x == 2;
          // DeepEP's FP8 input is the cast of the rank-constant x.
          c.kind = x == 0 ? XKind::random : XKind::rank_constant;
          // Every other case with top-k, covering all three inputs.
          c.alignment = n++ % 4 == 3 ? 128 : 1;
          const char* x_name = x == 0 ? "BF16 (random)" : x == 1 ? "BF16 (rank-constant)" : "FP8";
          c.name =
              fmt::format("[testing] Running with {}, {} top-k (async={}, previous={}{})", x_name,
                          with_topk ? "with" : "without", bool_text(async), bool_text(previous),
                          c.alignment == 1 ? "" : fmt::format(", alignment={}", c.alignment));
          cases.push_back(c);
        }
      }
    }
  }
  auto edge = [&](const std::string& what) {
    CaseSpec c;
    c.hidden = hidden;
    c.name = "[edge] " + what + " (BF16 random, with top-k)";
    return c;
  };
  const int one = std::min(1, ranks - 1);
  CaseSpec zero = edge(fmt::format("0 tokens on rank {}", one));
  zero.zero_tokens_rank = one;
  cases.push_back(zero);
  CaseSpec masked =
      edge(fmt::format("tokens routed to no expert (rank {} all, others 30 %)", ranks - 1));
  masked.masked_rank = ranks - 1;
  cases.push_back(masked);
  CaseSpec only = edge("all tokens to rank 0");
  only.only_rank = 0;
  cases.push_back(only);
  for (int h : o.edge_hidden) {
    CaseSpec c = edge(fmt::format("hidden {}", h));
    c.hidden = h;
    cases.push_back(c);
  }
  CaseSpec i32 = edge("int32 topk_idx");
  i32.topk32 = true;
  cases.push_back(i32);
  CaseSpec rc = edge("int32 topk_idx, rank-constant, alignment 128");
  rc.name = "[edge] int32 topk_idx (BF16 rank-constant, with top-k, alignment=128)";
  rc.topk32 = true;
  rc.kind = XKind::rank_constant;
  rc.alignment = 128;
  cases.push_back(rc);
  CaseSpec outside = edge("combine of rows outside the ep::Buffer");
  outside.combine_from = CaseSpec::CombineFrom::outside;
  cases.push_back(outside);
  CaseSpec in_place = edge("combine of rows written into combine_input()");
  in_place.combine_from = CaseSpec::CombineFrom::combine_input;
  cases.push_back(in_place);
  CaseSpec one_bias = edge("combine with a bias, into caller memory");
  one_bias.biases = 1;
  one_bias.combine_into_caller = true;
  cases.push_back(one_bias);
  CaseSpec two_biases = edge("combine with two biases");
  two_biases.biases = 2;
  cases.push_back(two_biases);
  return cases;
}

}  // namespace epkit::harness
