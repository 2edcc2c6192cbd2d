#include "ep_harness/low_latency_reference.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>

namespace epkit::harness::low_latency_reference {
namespace {

namespace cf = conformance;

constexpr float k_fp8_max = 448.0f;
constexpr float k_fp8_max_inv = 1.0f / 448.0f;
constexpr float k_amax_floor = 1e-4f;

float pow2(int e) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(e + 127) << 23);
}

}  // namespace

std::uint8_t float_to_e4m3(float v) {
  const std::uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  if (std::isnan(v)) return 0x7f;
  const float a = std::fabs(v);
  if (a >= 464.0f) return sign | 0x7e;  // past the midpoint to the next step: saturate
  // Subnormals step by 2^-9 below 2^-6; normals have 3 mantissa bits.
  int e = 0;
  if (a < 0x1.0p-6f) {
    const float q = std::nearbyint(a * 512.0f);  // ties to even (default rounding)
    return sign | static_cast<std::uint8_t>(q);  // q == 8 is 2^-6, encoded 0x08 as well
  }
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exponent = e - 1;               // a = (2m) * 2^exponent, 2m in [1, 2)
  float q = std::nearbyint((2.0f * m - 1.0f) * 8.0f);
  if (q == 8.0f) {
    q = 0.0f;
    ++exponent;
  }
  if (exponent > 8 || (exponent == 8 && q > 6.0f)) return sign | 0x7e;
  return sign | static_cast<std::uint8_t>(((exponent + 7) << 3) | static_cast<int>(q));
}

void cast_row(const std::uint16_t* x, int hidden, bool round_scale, std::uint8_t* fp8,
              float* scales) {
  for (int g = 0; g < hidden / 128; ++g) {
    float amax = k_amax_floor;
    for (int i = 0; i < 128; ++i)
      amax = std::fmax(amax, std::fabs(cf::bf16_to_float(x[g * 128 + i])));
    float scale, scale_inv;
    if (round_scale) {
      const auto bits = std::bit_cast<std::uint32_t>(amax * k_fp8_max_inv);
      const int exponent =
          static_cast<int>((bits >> 23) & 0xffu) - 127 + ((bits & 0x7fffffu) != 0u ? 1 : 0);
      scale = pow2(-exponent);
      scale_inv = pow2(exponent);
    } else {
      scale_inv = amax * k_fp8_max_inv;
      scale = k_fp8_max / amax;
    }
    scales[g] = scale_inv;
    for (int i = 0; i < 128; ++i)
      fp8[g * 128 + i] = float_to_e4m3(cf::bf16_to_float(x[g * 128 + i]) * scale);
  }
}

void dequantize_row(const std::uint8_t* fp8, const float* scales, int hidden, std::uint16_t* out) {
  for (int i = 0; i < hidden; ++i)
    out[i] = cf::float_to_bf16(cf::fp8_e4m3_to_float(fp8[i]) * scales[i / 128]);
}

std::uint8_t ue8m0_of(float scale) {
  return static_cast<std::uint8_t>(std::bit_cast<std::uint32_t>(scale) >> 23);
}

ExpectedDispatch expected_dispatch(const cf::GatheredRouting& routing, int rank, int max_tokens) {
  const int ranks = routing.num_ranks;
  const int local = routing.num_experts / ranks;
  ExpectedDispatch out;
  out.local_experts = local;
  out.rows_per_expert = static_cast<std::int64_t>(ranks) * max_tokens;
  out.recv_count.assign(static_cast<std::size_t>(local), 0);
  out.layout_range.assign(static_cast<std::size_t>(local * ranks), 0);
  out.rows.resize(static_cast<std::size_t>(local));
  for (int le = 0; le < local; ++le) {
    const std::int64_t expert = static_cast<std::int64_t>(rank) * local + le;
    auto& rows = out.rows[static_cast<std::size_t>(le)];
    for (int s = 0; s < ranks; ++s) {
      const auto first = static_cast<std::int64_t>(rows.size());
      const auto& idx = routing.topk_idx[static_cast<std::size_t>(s)];
      for (int t = 0; t < routing.num_tokens[static_cast<std::size_t>(s)]; ++t)
        for (int k = 0; k < routing.num_topk; ++k)
          if (idx[static_cast<std::size_t>(t * routing.num_topk + k)] == expert)
            rows.push_back({s, t, k});
      const auto n = static_cast<std::int64_t>(rows.size()) - first;
      out.layout_range[static_cast<std::size_t>(le * ranks + s)] = (first << 32) | n;
    }
    out.recv_count[static_cast<std::size_t>(le)] = static_cast<int>(rows.size());
  }
  return out;
}

std::vector<std::uint16_t> expected_combine(const std::vector<std::uint16_t>& values,
                                            const std::vector<std::int64_t>& topk_idx,
                                            const std::vector<float>& topk_weights, int tokens,
                                            int topk, int experts, int hidden) {
  std::vector<std::uint16_t> out(static_cast<std::size_t>(tokens) *
                                 static_cast<std::size_t>(hidden));
  std::vector<float> acc(static_cast<std::size_t>(hidden));
  for (int t = 0; t < tokens; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    const std::uint16_t* v = values.data() + static_cast<std::size_t>(t) * hidden;
    for (int k = 0; k < topk; ++k) {
      const auto at = static_cast<std::size_t>(t * topk + k);
      if (topk_idx[at] < 0 || topk_idx[at] >= experts) continue;
      const float w = topk_weights[at];
      for (int h = 0; h < hidden; ++h)
        acc[static_cast<std::size_t>(h)] =
            std::fma(cf::bf16_to_float(v[h]), w, acc[static_cast<std::size_t>(h)]);
    }
    for (int h = 0; h < hidden; ++h)
      out[static_cast<std::size_t>(t) * hidden + h] =
          cf::float_to_bf16(acc[static_cast<std::size_t>(h)]);
  }
  return out;
}

conformance::Verdict deepep_rank_constant_check(const std::vector<float>& rows, int hidden,
                                                const std::vector<int>& src_info,
                                                const std::vector<std::int64_t>& ranges,
                                                bool round_scale) {
  const auto count = src_info.size();
  const auto h = static_cast<std::size_t>(hidden);
  if (rows.size() != count * h)
    return fmt::format("{} values for {} rows of {}", rows.size(), count, hidden);
  std::vector<double> last, token;
  for (std::size_t r = 0; r < count; ++r) {
    const float* row = rows.data() + r * h;
    if (h > 128) {
      const auto [lo, hi] = std::minmax_element(row, row + h - 128);
      if (*lo != *hi)
        return fmt::format("row {}: min {} != max {} before the last 128", r, *lo, *hi);
    }
    if (round_scale) {
      last.push_back(row[h - 1]);
      token.push_back(src_info[r]);
      continue;
    }
    // The input holds the index as BF16 (exact up to 256).
    const float index = cf::bf16_to_float(cf::float_to_bf16(static_cast<float>(src_info[r])));
    for (std::size_t i = h - 128; i < h; ++i)
      if (row[i] != index)
        return fmt::format("row {}, channel {}: {}, the token index is {}", r, i, row[i],
                           src_info[r]);
  }
  if (round_scale) {
    const double d = cf::calc_diff(last, token);
    if (d >= 0.007) return fmt::format("last channel vs token index: calc_diff {} >= 0.007", d);
    return std::nullopt;
  }
  for (std::size_t j = 0; j < ranges.size(); ++j) {
    const auto first = static_cast<std::size_t>(ranges[j] >> 32);
    const auto n = static_cast<std::size_t>(ranges[j] & 0xffffffff);
    const float want = static_cast<float>(static_cast<int>(j) - 128);
    for (std::size_t r = first; r < first + n && r < count; ++r)
      if (rows[r * h] != want)
        return fmt::format("row {} is in source {}'s range but holds {}", r, j, rows[r * h]);
  }
  return std::nullopt;
}

conformance::Verdict deepep_combine_check(const std::vector<float>& combined,
                                          const std::vector<float>& x,
                                          const std::vector<std::int64_t>& topk_idx,
                                          const std::vector<float>& topk_weights, int topk,
                                          int experts, int hidden, double limit) {
  const auto h = static_cast<std::size_t>(hidden);
  const std::size_t tokens = h == 0 ? 0 : x.size() / h;
  std::vector<double> want(x.size()), got(combined.begin(), combined.end());
  for (std::size_t i = 0; i < combined.size(); ++i)
    if (std::isnan(combined[i])) return fmt::format("NaN at token {}, channel {}", i / h, i % h);
  for (std::size_t t = 0; t < tokens; ++t) {
    double sum = 0;
    for (int k = 0; k < topk; ++k) {
      const auto at = t * static_cast<std::size_t>(topk) + static_cast<std::size_t>(k);
      if (topk_idx[at] >= 0 && topk_idx[at] < experts) sum += topk_weights[at];
    }
    for (std::size_t i = 0; i < h; ++i) want[t * h + i] = x[t * h + i] * sum;
  }
  const double d = cf::calc_diff(want, got);
  if (d >= limit)
    return fmt::format("calc_diff(x * sum of weights, combined) = {} >= {}", d, limit);
  return std::nullopt;
}

}  // namespace epkit::harness::low_latency_reference
