// The low-latency conformance cases: DeepEP V1's test_low_latency.py sweep
// in its order, and the edge cases epkit adds.
#include <fmt/format.h>

#include <algorithm>

#include "ep_harness/conformance/case.h"

namespace epkit::harness {

std::vector<LowLatencyCase> low_latency_cases(const ConformanceOptions&, int ranks) {
  std::vector<LowLatencyCase> cases;
  struct Cast {
    bool fp8, round_scale, ue8m0;
    const char* name;
  };
  const Cast casts[] = {{false, false, false, "BF16"},
                        {true, false, false, "FP8"},
                        {true, true, false, "FP8 round_scale"},
                        {true, true, true, "FP8 round_scale UE8M0"}};
  for (bool rank_constant : {true, false}) {
    for (bool hook : {false, true}) {
      for (const Cast& cast : casts) {
        LowLatencyCase c;
        c.rank_constant = rank_constant;
        c.hook = hook;
        c.fp8 = cast.fp8;
        c.round_scale = cast.round_scale;
        c.ue8m0 = cast.ue8m0;
        c.name = fmt::format("[low-latency] {} x, {}, return_recv_hook={}",
                             rank_constant ? "rank-constant" : "random", cast.name,
                             hook ? "True" : "False");
        cases.push_back(c);
      }
    }
  }
  auto edge = [](const std::string& what) {
    LowLatencyCase c;
    c.name = "[low-latency edge] " + what;
    return c;
  };
  const int one = std::min(1, ranks - 1);
  LowLatencyCase zero = edge(fmt::format("0 tokens on rank {} (BF16)", one));
  zero.zero_tokens_rank = one;
  cases.push_back(zero);
  LowLatencyCase masked = edge(fmt::format("every top-k slot of rank {} is -1 (FP8)", ranks - 1));
  masked.masked_rank = ranks - 1;
  masked.fp8 = true;
  cases.push_back(masked);
  LowLatencyCase i32 = edge("int32 topk_idx (FP8 round_scale, hook)");
  i32.topk32 = true;
  i32.fp8 = i32.round_scale = true;
  i32.hook = true;
  cases.push_back(i32);
  LowLatencyCase two = edge("two dispatches and two combines in flight, hooks called after (FP8)");
  two.two_in_flight = true;
  two.hook = true;
  two.fp8 = true;
  two.rank_constant = false;
  cases.push_back(two);
  LowLatencyCase clean = edge("clean_low_latency_buffer, then a dispatch and combine (BF16)");
  clean.clean_first = true;
  cases.push_back(clean);
  return cases;
}

}  // namespace epkit::harness
