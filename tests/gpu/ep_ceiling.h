// See ep_ceiling.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

struct CeilingArgs {
  const std::uint8_t* src = nullptr;
  std::uint8_t* peers[8] = {};  // every rank's receive block (mapped); ours too
  std::int64_t bytes_per_peer = 0;
  int rank = 0;
  int ranks = 1;
};

cudaError_t launch_all_to_all_write(const CeilingArgs& args, int blocks, cudaStream_t stream);
