#include "bench/kernels/data_check.h"

namespace epkit::bench::kernels {
namespace {

constexpr int k_threads = 256;

unsigned blocks_for(std::size_t count) {
  std::size_t b = (count + k_threads - 1) / k_threads;
  return static_cast<unsigned>(b > 4096 ? 4096 : (b == 0 ? 1 : b));
}

template <typename T>
__global__ void fill_kernel(T* buf, std::size_t count, std::uint32_t seed, int rank,
                            std::size_t offset) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    buf[i] = static_cast<T>(input_value(seed, rank, offset + i));
  }
}

__device__ std::int64_t expected(const CheckSpec& s, std::size_t j) {
  switch (s.expect) {
    case Expect::sum_all: {
      std::int64_t sum = 0;
      for (int r = 0; r < s.nranks; ++r) sum += input_value(s.seed, r, j);
      return sum;
    }
    case Expect::gather:
      return input_value(s.seed, static_cast<int>(j / s.per_rank), j % s.per_rank);
    case Expect::reduce_scatter: {
      std::int64_t sum = 0;
      for (int r = 0; r < s.nranks; ++r) {
        sum += input_value(s.seed, r, static_cast<std::size_t>(s.me) * s.per_rank + j);
      }
      return sum;
    }
    case Expect::alltoall:
      return input_value(s.seed, static_cast<int>(j / s.per_rank),
                         static_cast<std::size_t>(s.me) * s.per_rank + j % s.per_rank);
    case Expect::from_rank:
      return input_value(s.seed, s.peer, j);
  }
  return -1;
}

template <typename T>
__global__ void check_kernel(const T* buf, std::size_t count, CheckSpec spec,
                             unsigned long long* wrong) {
  unsigned long long mine = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    if (buf[i] != static_cast<T>(expected(spec, i))) ++mine;
  }
  if (mine != 0) atomicAdd(wrong, mine);
}

template <typename T>
cudaError_t fill_as(void* buf, std::size_t count, std::uint32_t seed, int rank,
                    std::size_t offset, cudaStream_t stream) {
  fill_kernel<T><<<blocks_for(count), k_threads, 0, stream>>>(static_cast<T*>(buf), count, seed,
                                                              rank, offset);
  return cudaGetLastError();
}

template <typename T>
cudaError_t check_as(const void* buf, std::size_t count, const CheckSpec& spec,
                     unsigned long long* wrong, cudaStream_t stream) {
  check_kernel<T><<<blocks_for(count), k_threads, 0, stream>>>(static_cast<const T*>(buf), count,
                                                               spec, wrong);
  return cudaGetLastError();
}

}  // namespace

cudaError_t fill(void* buf, Elem type, std::size_t count, std::uint32_t seed, int rank,
                 std::size_t offset, cudaStream_t stream) {
  switch (type) {
    case Elem::f32: return fill_as<float>(buf, count, seed, rank, offset, stream);
    case Elem::f64: return fill_as<double>(buf, count, seed, rank, offset, stream);
    case Elem::i32: return fill_as<std::int32_t>(buf, count, seed, rank, offset, stream);
    case Elem::i64: return fill_as<std::int64_t>(buf, count, seed, rank, offset, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t check(const void* buf, Elem type, std::size_t count, const CheckSpec& spec,
                  unsigned long long* wrong, cudaStream_t stream) {
  switch (type) {
    case Elem::f32: return check_as<float>(buf, count, spec, wrong, stream);
    case Elem::f64: return check_as<double>(buf, count, spec, wrong, stream);
    case Elem::i32: return check_as<std::int32_t>(buf, count, spec, wrong, stream);
    case Elem::i64: return check_as<std::int64_t>(buf, count, spec, wrong, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace epkit::bench::kernels
