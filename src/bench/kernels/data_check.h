// Host launchers of the benchmark's data kernels: the input of every rank is
// a function of (seed, rank, index) computed on the GPU, and the expected
// output is computed again on each GPU and compared there, so no buffer is
// ever copied to the host.
#pragma once

#ifdef EPKIT_WITH_CUDA

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace epkit::bench::kernels {

enum class Elem { f32, f64, i32, i64 };

/// How output element j of this rank is expected to be built.
enum class Expect {
  sum_all,          // all_reduce: sum over ranks of f(r, j)
  gather,           // all_gather: f(j / per_rank, j % per_rank)
  reduce_scatter,   // sum over ranks of f(r, me * per_rank + j)
  alltoall,         // f(j / per_rank, me * per_rank + j % per_rank)
  from_rank,        // broadcast / sendrecv: f(peer, j)
};

/// Small integers, so every sum over ranks is exact in each type.
__host__ __device__ inline std::int64_t input_value(std::uint32_t seed, int rank,
                                                     std::size_t index) {
  return static_cast<std::int64_t>((seed + 7u * static_cast<std::uint32_t>(rank) +
                                    13u * static_cast<std::uint32_t>(index % 65521u)) %
                                   17u);
}

/// buf[i] = f(seed, rank, offset + i) for i < count.
cudaError_t fill(void* buf, Elem type, std::size_t count, std::uint32_t seed, int rank,
                 std::size_t offset, cudaStream_t stream);

struct CheckSpec {
  Expect expect = Expect::sum_all;
  int me = 0;
  int nranks = 1;
  int peer = 0;  // from_rank
  std::size_t per_rank = 0;
  std::uint32_t seed = 0;
};

/// Adds the number of elements of buf that differ from the expectation to
/// *wrong (device memory, zeroed by the caller).
cudaError_t check(const void* buf, Elem type, std::size_t count, const CheckSpec& spec,
                  unsigned long long* wrong, cudaStream_t stream);

}  // namespace epkit::bench::kernels

#endif
