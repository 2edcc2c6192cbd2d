// make_test_inputs (testdata.h): x and its FP8 cast made on the GPU from a
// counter-based hash, the routing drawn on the host (testdata_routing.h).
#include "ep_harness/testdata.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "ep_harness/testdata_kernels.h"
#include "ep_harness/testdata_routing.h"

namespace epkit::harness {
namespace {

// Tags of the independent draw streams: changing the mask share leaves the
// experts as they were, and so on.
constexpr std::uint64_t k_tag_x = 1;
constexpr std::uint64_t k_tag_experts = 2;
constexpr std::uint64_t k_tag_mask = 3;
constexpr std::uint64_t k_tag_weights = 4;

std::uint64_t mix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::uint64_t test_stream_key(std::uint64_t seed, int rank, std::uint64_t tag) {
  return mix64(mix64(mix64(seed) ^ static_cast<std::uint64_t>(rank)) ^ tag);
}

Result<void> check_test_options(const TestInputOptions& o) {
  const TestShape& s = o.shape;
  auto bad = [](std::string why) {
    return make_error(ErrorCode::invalid, "test inputs: " + std::move(why));
  };
  if (o.num_ranks < 1 || o.rank < 0 || o.rank >= o.num_ranks)
    return bad(fmt::format("rank {} of {}", o.rank, o.num_ranks));
  if (s.num_tokens < 0) return bad(fmt::format("{} tokens", s.num_tokens));
  if (s.hidden < 128 || s.hidden % 128 != 0)
    return bad(
        fmt::format("hidden {} is not a positive multiple of 128 (the FP8 groups)", s.hidden));
  if (s.num_topk < 1) return bad(fmt::format("top-{}", s.num_topk));
  if (s.num_experts < 1 || s.num_experts % o.num_ranks != 0)
    return bad(
        fmt::format("{} experts do not split evenly over {} ranks", s.num_experts, o.num_ranks));
  if (o.only_rank < -1 || o.only_rank >= o.num_ranks)
    return bad(fmt::format("only_rank {} is not a rank of {}", o.only_rank, o.num_ranks));
  const int candidates = o.only_rank >= 0 ? s.num_experts / o.num_ranks : s.num_experts;
  if (s.num_topk > candidates)
    return bad(fmt::format("top-{} of {} experts{}", s.num_topk, candidates,
                           o.only_rank >= 0 ? fmt::format(" (rank {}'s)", o.only_rank) : ""));
  if (!(o.masked_fraction >= 0.0 && o.masked_fraction <= 1.0))
    return bad(fmt::format("masked_fraction {} is outside [0, 1]", o.masked_fraction));
  return {};
}

Result<TestRouting> make_test_routing(const TestInputOptions& o) {
  EPKIT_TRY(check_test_options(o));
  const TestShape& s = o.shape;
  const auto tokens = static_cast<std::size_t>(s.num_tokens);
  const auto k = static_cast<std::size_t>(s.num_topk);
  const int experts_per_rank = s.num_experts / o.num_ranks;
  const int first = o.only_rank >= 0 ? o.only_rank * experts_per_rank : 0;
  const auto candidates =
      static_cast<std::size_t>(o.only_rank >= 0 ? experts_per_rank : s.num_experts);

  TestRouting out;
  out.topk_idx.resize(tokens * k);
  out.topk_weights.resize(tokens * k);

  std::mt19937_64 experts_rng(test_stream_key(o.seed, o.rank, k_tag_experts));
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> score(candidates);
  std::vector<int> order(candidates);
  for (std::size_t t = 0; t < tokens; ++t) {
    for (double& v : score) v = std::fabs(normal(experts_rng)) + 1.0;
    std::iota(order.begin(), order.end(), 0);
    // Highest score first; ties (next to impossible) by expert id, so the
    // result never depends on the sort's internals.
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      [&](int a, int b) {
                        auto ua = static_cast<std::size_t>(a);
                        auto ub = static_cast<std::size_t>(b);
                        return score[ua] != score[ub] ? score[ua] > score[ub] : a < b;
                      });
    for (std::size_t j = 0; j < k; ++j) out.topk_idx[t * k + j] = first + order[j];
  }

  // The masked slots: a partial Fisher-Yates shuffle picks exactly that many.
  const auto slots = tokens * k;
  const auto masked =
      static_cast<std::size_t>(std::llround(o.masked_fraction * static_cast<double>(slots)));
  if (masked > 0) {
    std::mt19937_64 mask_rng(test_stream_key(o.seed, o.rank, k_tag_mask));
    std::vector<std::size_t> slot(slots);
    std::iota(slot.begin(), slot.end(), std::size_t{0});
    for (std::size_t i = 0; i < masked && i < slots; ++i) {
      std::uniform_int_distribution<std::size_t> pick(i, slots - 1);
      std::swap(slot[i], slot[pick(mask_rng)]);
      out.topk_idx[slot[i]] = -1;
    }
  }

  if (o.kind == XKind::rank_constant) {
    std::fill(out.topk_weights.begin(), out.topk_weights.end(), static_cast<float>(o.rank));
  } else {
    std::mt19937_64 weights_rng(test_stream_key(o.seed, o.rank, k_tag_weights));
    for (float& w : out.topk_weights) w = static_cast<float>(normal(weights_rng));
  }
  return out;
}

Result<TestInputs> make_test_inputs(const TestInputOptions& o, cudaStream_t stream) {
  auto routing = make_test_routing(o);
  if (!routing) return routing.error();
  const TestShape& s = o.shape;
  const std::int64_t tokens = s.num_tokens;
  const std::int64_t hidden = s.hidden;
  const std::int64_t groups = hidden / 128;

  TestInputs in;
  auto x = ep::DeviceTensor::uninitialised(ep::DType::bf16, tokens, hidden);
  if (!x) return x.error();
  in.x = std::move(*x);
  if (o.kind == XKind::rank_constant) {
    EPKIT_TRY(cuda_ok(kernels::testdata_fill_constant_bf16(in.x.memory.get(), tokens * hidden,
                                                           static_cast<float>(o.rank), stream),
                      "test inputs: filling x"));
  } else {
    EPKIT_TRY(cuda_ok(
        kernels::testdata_fill_normal_bf16(in.x.memory.get(), tokens * hidden,
                                           test_stream_key(o.seed, o.rank, k_tag_x), stream),
        "test inputs: filling x"));
  }

  auto fp8 = ep::DeviceTensor::uninitialised(ep::DType::fp8_e4m3, tokens, hidden);
  if (!fp8) return fp8.error();
  in.x_fp8 = std::move(*fp8);
  auto scales =
      ep::DeviceMemory::allocate(static_cast<std::size_t>(tokens * groups) * sizeof(float));
  if (!scales) return scales.error();
  in.x_scales.memory = std::move(*scales);
  // Both views say column-major: the memory is DeepEP's `s.T.contiguous().T`.
  in.x_scales.view =
      ep::TensorView::column_major(in.x_scales.memory.get(), ep::DType::fp32, tokens, groups);
  in.x_scales_view = in.x_scales.view;
  EPKIT_TRY(cuda_ok(
      kernels::testdata_cast_fp8(in.x.memory.get(), in.x_fp8.memory.get(),
                                 static_cast<float*>(in.x_scales.memory.get()),
                                 static_cast<int>(tokens), static_cast<int>(hidden), stream),
      "test inputs: casting x to FP8"));

  // from_host copies synchronously on the legacy stream: done when it returns.
  std::vector<std::int32_t> idx32(routing->topk_idx.begin(), routing->topk_idx.end());
  auto topk =
      ep::DeviceTensor::from_host(ep::DType::int64, tokens, s.num_topk, routing->topk_idx.data());
  if (!topk) return topk.error();
  in.topk_idx = std::move(*topk);
  auto topk32 = ep::DeviceTensor::from_host(ep::DType::int32, tokens, s.num_topk, idx32.data());
  if (!topk32) return topk32.error();
  in.topk_idx32 = std::move(*topk32);
  auto weights = ep::DeviceTensor::from_host(ep::DType::fp32, tokens, s.num_topk,
                                             routing->topk_weights.data());
  if (!weights) return weights.error();
  in.topk_weights = std::move(*weights);

  // Ready for any stream once this returns.
  EPKIT_TRY(cuda_ok(cudaStreamSynchronize(stream), "test inputs: cudaStreamSynchronize"));
  return in;
}

}  // namespace epkit::harness
