// `epkit bench ep --dump DIR`: every rank's inputs and outputs as .npy
// files, with a README.txt that says how to read them.
#pragma once

#include <string>

#include "bench/ep_bench.h"
#include "ep_harness/bench/host_copies.h"

namespace epkit::harness::detail {

struct DumpData {
  HostTensor x, x_fp8, x_scales, topk_idx, topk_weights;
  HostTensor num_tokens_per_rank, num_tokens_per_expert, is_token_in_rank;
  HostDispatch bf16, fp8;
  HostCombine combined;
};

Result<void> write_dump(const std::string& dir, int rank, const bench::EpReport& rep,
                        const DumpData& d);

}  // namespace epkit::harness::detail
