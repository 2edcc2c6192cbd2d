#include "ep_harness/conformance_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace epkit::harness::conformance {
namespace {

// Where flat index i sits, for messages about [rows, cols] arrays.
std::string position(std::size_t i, std::size_t row_len) {
  if (row_len <= 1) return fmt::format("index {}", i);
  return fmt::format("row {}, column {}", i / row_len, i % row_len);
}

// The source rank of receive row `row` from rank_prefix_matrix's column `rank`.
int source_of(std::int64_t row, const std::vector<int>& prefix, int num_ranks, int rank) {
  for (int i = 0; i < num_ranks; ++i) {
    if (row < prefix[static_cast<std::size_t>(i * num_ranks + rank)]) return i;
  }
  return -1;
}

Verdict check_segments(const std::vector<int>& prefix, int num_ranks, int rank, std::int64_t rows) {
  if (prefix.size() != static_cast<std::size_t>(num_ranks * num_ranks)) {
    return fmt::format("rank_prefix_matrix has {} elements, expected {}", prefix.size(),
                       num_ranks * num_ranks);
  }
  int last = 0;
  for (int i = 0; i < num_ranks; ++i) {
    int end = prefix[static_cast<std::size_t>(i * num_ranks + rank)];
    if (end < last) {
      return fmt::format("rank_prefix_matrix[{}][{}] = {} is below the previous {}", i, rank, end,
                         last);
    }
    last = end;
  }
  if (last != rows) {
    return fmt::format("rank_prefix_matrix[{}][{}] = {} but {} rows were received", num_ranks - 1,
                       rank, last, rows);
  }
  return std::nullopt;
}

}  // namespace

double calc_diff(const std::vector<double>& x, const std::vector<double>& y) {
  double num = 0;
  double den = 0;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
    double a = x[i] + 1.0;
    double b = y[i] + 1.0;
    num += a * b;
    den += a * a + b * b;
  }
  if (den == 0) return 0;
  return 1.0 - 2.0 * num / den;
}

float bf16_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

std::uint16_t float_to_bf16(float value) {
  auto bits = std::bit_cast<std::uint32_t>(value);
  if (std::isnan(value)) return 0x7fc0;
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

float fp8_e4m3_to_float(std::uint8_t bits) {
  const bool negative = (bits & 0x80) != 0;
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  float v;
  if (exponent == 0xf && mantissa == 0x7) {
    v = std::nanf("");
  } else if (exponent == 0) {
    v = std::ldexp(static_cast<float>(mantissa) / 8.0f, -6);
  } else {
    v = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  }
  return negative ? -v : v;
}

std::vector<float> decode_bf16(const std::vector<std::uint8_t>& bytes) {
  auto raw = as_vector<std::uint16_t>(bytes);
  std::vector<float> out(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) out[i] = bf16_to_float(raw[i]);
  return out;
}

std::vector<float> dequantize_fp8(const std::vector<std::uint8_t>& fp8,
                                  const std::vector<float>& scales, std::int64_t rows,
                                  std::int64_t hidden) {
  const std::int64_t groups = hidden / 128;
  // A table: hundreds of millions of elements per case at DeepEP's shape.
  float table[256];
  for (int b = 0; b < 256; ++b) table[b] = fp8_e4m3_to_float(static_cast<std::uint8_t>(b));
  std::vector<float> out(static_cast<std::size_t>(rows * hidden));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < hidden; ++c) {
      auto i = static_cast<std::size_t>(r * hidden + c);
      float scale = scales[static_cast<std::size_t>(r * groups + c / 128)];
      out[i] = bf16_to_float(float_to_bf16(table[fp8[i]] * scale));
    }
  }
  return out;
}

std::vector<std::int64_t> decode_index(const std::vector<std::uint8_t>& bytes, int elem_size) {
  if (elem_size == 8) return as_vector<std::int64_t>(bytes);
  auto narrow = as_vector<std::int32_t>(bytes);
  return {narrow.begin(), narrow.end()};
}

Verdict compare_ints(const std::vector<std::int64_t>& expect,
                     const std::vector<std::int64_t>& got) {
  if (expect.size() != got.size()) {
    return fmt::format("{} elements, expected {}", got.size(), expect.size());
  }
  for (std::size_t i = 0; i < expect.size(); ++i) {
    if (expect[i] != got[i]) {
      return fmt::format("index {}: expected {}, got {}", i, expect[i], got[i]);
    }
  }
  return std::nullopt;
}

Verdict compare_ints(const std::vector<int>& expect, const std::vector<int>& got) {
  return compare_ints(std::vector<std::int64_t>(expect.begin(), expect.end()),
                      std::vector<std::int64_t>(got.begin(), got.end()));
}

bool gathered_own_part_intact(const void* all, std::size_t all_bytes, const void* mine,
                              std::size_t part_bytes, int rank) {
  if (rank < 0) return false;
  const std::size_t at = static_cast<std::size_t>(rank) * part_bytes;
  if (at > all_bytes || part_bytes > all_bytes - at) return false;
  return part_bytes == 0 ||
         std::memcmp(static_cast<const std::uint8_t*>(all) + at, mine, part_bytes) == 0;
}

Verdict compare_bytes(const std::vector<std::uint8_t>& expect, const std::vector<std::uint8_t>& got,
                      std::size_t row_bytes) {
  if (expect.size() != got.size()) {
    return fmt::format("{} bytes, expected {}", got.size(), expect.size());
  }
  if (std::memcmp(expect.data(), got.data(), expect.size()) == 0) return std::nullopt;
  auto at = std::mismatch(expect.begin(), expect.end(), got.begin());
  auto i = static_cast<std::size_t>(at.first - expect.begin());
  row_bytes = std::max<std::size_t>(row_bytes, 1);
  return fmt::format("row {}, byte {}: expected 0x{:02x}, got 0x{:02x}", i / row_bytes,
                     i % row_bytes, *at.first, *at.second);
}

Verdict compare_prefix(const std::vector<std::uint8_t>& expect,
                       const std::vector<std::uint8_t>& got, std::size_t row_bytes,
                       std::int64_t rows) {
  auto bytes = static_cast<std::size_t>(rows) * row_bytes;
  if (expect.size() != bytes) {
    return fmt::format("the normal result has {} bytes, expected {} rows of {}", expect.size(),
                       rows, row_bytes);
  }
  if (got.size() < bytes) {
    return fmt::format("{} bytes, fewer than the {} received rows need", got.size(), bytes);
  }
  return compare_bytes(
      expect,
      std::vector<std::uint8_t>(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(bytes)),
      row_bytes);
}

ExpectedRecv expected_recv(const GatheredRouting& g, int rank) {
  const int ranks = g.num_ranks;
  const int local = g.num_experts / ranks;
  const std::int64_t lo = static_cast<std::int64_t>(rank) * local;
  ExpectedRecv e;
  e.rank_prefix_matrix.assign(static_cast<std::size_t>(ranks * ranks), 0);
  e.tokens_per_expert.assign(static_cast<std::size_t>(local), 0);
  for (int src = 0; src < ranks; ++src) {
    const auto& idx = g.topk_idx[static_cast<std::size_t>(src)];
    const auto* w = g.topk_weights.size() > static_cast<std::size_t>(src)
                        ? &g.topk_weights[static_cast<std::size_t>(src)]
                        : nullptr;
    std::vector<int> sent(static_cast<std::size_t>(ranks), 0);
    for (int t = 0; t < g.num_tokens[static_cast<std::size_t>(src)]; ++t) {
      std::vector<bool> reaches(static_cast<std::size_t>(ranks), false);
      for (int k = 0; k < g.num_topk; ++k) {
        std::int64_t x = idx[static_cast<std::size_t>(t * g.num_topk + k)];
        if (x >= 0) reaches[static_cast<std::size_t>(x / local)] = true;
      }
      for (int r = 0; r < ranks; ++r)
        sent[static_cast<std::size_t>(r)] += reaches[static_cast<std::size_t>(r)] ? 1 : 0;
      if (src == rank) {
        e.token_reach.push_back(static_cast<int>(std::count(reaches.begin(), reaches.end(), true)));
      }
      if (!reaches[static_cast<std::size_t>(rank)]) continue;
      e.src_rank.push_back(src);
      e.src_idx.push_back(t);
      for (int k = 0; k < g.num_topk; ++k) {
        auto i = static_cast<std::size_t>(t * g.num_topk + k);
        std::int64_t x = idx[i];
        bool mine = x >= lo && x < lo + local;
        e.topk_idx.push_back(mine ? x - lo : -1);
        e.topk_weights.push_back(mine && w != nullptr && !w->empty() ? (*w)[i] : 0.0f);
        if (mine) ++e.tokens_per_expert[static_cast<std::size_t>(x - lo)];
      }
    }
    for (int r = 0; r < ranks; ++r) {
      int before =
          src == 0 ? 0 : e.rank_prefix_matrix[static_cast<std::size_t>((src - 1) * ranks + r)];
      e.rank_prefix_matrix[static_cast<std::size_t>(src * ranks + r)] =
          before + sent[static_cast<std::size_t>(r)];
    }
  }
  e.num_recv = static_cast<int>(e.src_idx.size());
  return e;
}

Verdict check_rank_constant_rows(const std::vector<float>& values, std::int64_t rows,
                                 std::int64_t cols, const std::vector<int>& prefix, int num_ranks,
                                 int rank) {
  if (auto bad = check_segments(prefix, num_ranks, rank, rows)) return bad;
  if (values.size() != static_cast<std::size_t>(rows * cols)) {
    return fmt::format("{} values, expected {} rows of {}", values.size(), rows, cols);
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const float want = static_cast<float>(source_of(r, prefix, num_ranks, rank));
    for (std::int64_t c = 0; c < cols; ++c) {
      float v = values[static_cast<std::size_t>(r * cols + c)];
      if (v != want) {
        return fmt::format("row {} of {}, column {}: expected {} (its source rank), got {}", r,
                           rows, c, want, v);
      }
    }
  }
  return std::nullopt;
}

Verdict check_expert_list(const std::vector<int>& list, const std::vector<int>& unaligned,
                          int alignment) {
  std::vector<int> want(unaligned.size());
  const int a = std::max(alignment, 1);
  for (std::size_t e = 0; e < unaligned.size(); ++e) want[e] = (unaligned[e] + a - 1) / a * a;
  if (list.size() != want.size()) {
    return fmt::format("{} local experts listed, expected {}", list.size(), want.size());
  }
  for (std::size_t e = 0; e < want.size(); ++e) {
    if (list[e] != want[e]) {
      return fmt::format("local expert {}: expected {} (alignment {}), got {}", e, want[e], a,
                         list[e]);
    }
  }
  return std::nullopt;
}

Verdict check_recv_topk_idx(const std::vector<std::int64_t>& idx, int num_topk, int local_experts,
                            const std::vector<int>& unaligned) {
  std::vector<int> seen(static_cast<std::size_t>(local_experts), 0);
  for (std::size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] < -1 || idx[i] >= local_experts) {
      return fmt::format("{}: {} is outside [-1, {})",
                         position(i, static_cast<std::size_t>(num_topk)), idx[i], local_experts);
    }
    if (idx[i] >= 0) ++seen[static_cast<std::size_t>(idx[i])];
  }
  for (int e = 0; e < local_experts; ++e) {
    int want =
        static_cast<std::size_t>(e) < unaligned.size() ? unaligned[static_cast<std::size_t>(e)] : 0;
    if (seen[static_cast<std::size_t>(e)] != want) {
      return fmt::format("local expert {} occurs {} times, its count is {}", e,
                         seen[static_cast<std::size_t>(e)], want);
    }
  }
  return std::nullopt;
}

Verdict check_rank_constant_weights(const std::vector<float>& weights,
                                    const std::vector<std::int64_t>& idx, int num_topk,
                                    const std::vector<int>& prefix, int num_ranks, int rank) {
  const auto k = static_cast<std::size_t>(num_topk);
  if (weights.size() != idx.size() || k == 0) {
    return fmt::format("{} weights for {} indices", weights.size(), idx.size());
  }
  const auto rows = static_cast<std::int64_t>(weights.size() / k);
  if (auto bad = check_segments(prefix, num_ranks, rank, rows)) return bad;
  for (std::int64_t r = 0; r < rows; ++r) {
    auto row = static_cast<std::size_t>(r) * k;
    float max = *std::max_element(weights.begin() + static_cast<std::ptrdiff_t>(row),
                                  weights.begin() + static_cast<std::ptrdiff_t>(row + k));
    const float want = static_cast<float>(source_of(r, prefix, num_ranks, rank));
    for (std::size_t j = 0; j < k; ++j) {
      float v = idx[row + j] == -1 ? max : weights[row + j];
      if (v != want) {
        return fmt::format("row {}, slot {}: expected {} (its source rank), got {}", r, j, want,
                           weights[row + j]);
      }
    }
  }
  return std::nullopt;
}

Verdict check_padding(const std::vector<std::int64_t>& idx, int num_topk, int num_recv) {
  for (std::size_t i = static_cast<std::size_t>(num_recv) * static_cast<std::size_t>(num_topk);
       i < idx.size(); ++i) {
    if (idx[i] != -1) {
      return fmt::format("padded {}: expected -1, got {}",
                         position(i, static_cast<std::size_t>(num_topk)), idx[i]);
    }
  }
  return std::nullopt;
}

Verdict check_combined_exact(const std::vector<float>& combined, std::int64_t hidden, int rank,
                             const std::vector<int>& reach) {
  if (combined.size() != reach.size() * static_cast<std::size_t>(hidden)) {
    return fmt::format("{} values, expected {} tokens of {}", combined.size(), reach.size(),
                       hidden);
  }
  for (std::size_t i = 0; i < combined.size(); ++i) {
    float want = static_cast<float>(rank * reach[i / static_cast<std::size_t>(hidden)]);
    if (combined[i] != want) {
      return fmt::format("{}: expected {} (rank {} x {} ranks reached), got {}",
                         position(i, static_cast<std::size_t>(hidden)), want, rank,
                         reach[i / static_cast<std::size_t>(hidden)], combined[i]);
    }
  }
  return std::nullopt;
}

Verdict check_combined_close(const std::vector<float>& combined, const std::vector<float>& x,
                             std::int64_t hidden, const std::vector<int>& reach, double limit) {
  const auto h = static_cast<std::size_t>(hidden);
  if (combined.size() != reach.size() * h || x.size() != combined.size()) {
    return fmt::format("{} combined values and {} inputs, expected {} tokens of {}",
                       combined.size(), x.size(), reach.size(), hidden);
  }
  std::vector<double> got;
  std::vector<double> want;
  for (std::size_t i = 0; i < combined.size(); ++i) {
    int n = reach[i / h];
    if (n == 0) {
      if (combined[i] != 0.0f) {
        return fmt::format("{}: the token went nowhere, expected 0, got {}", position(i, h),
                           combined[i]);
      }
      continue;
    }
    got.push_back(static_cast<double>(combined[i]) / n);
    want.push_back(x[i]);
  }
  double diff = calc_diff(got, want);
  if (!(diff < limit)) {
    return fmt::format("calc_diff(combined / ranks reached, x) = {:.3g}, limit {:.0e}", diff,
                       limit);
  }
  return std::nullopt;
}

Verdict check_combined_weights(const std::vector<float>& combined,
                               const std::vector<float>& weights,
                               const std::vector<std::int64_t>& idx, double limit) {
  if (combined.size() != weights.size() || idx.size() != weights.size()) {
    return fmt::format("{} combined weights for {} weights and {} indices", combined.size(),
                       weights.size(), idx.size());
  }
  std::vector<double> got;
  std::vector<double> want;
  for (std::size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] < 0) continue;
    got.push_back(combined[i]);
    want.push_back(weights[i]);
  }
  double diff = calc_diff(got, want);
  if (!(diff < limit)) {
    return fmt::format("calc_diff(combined weights, weights) = {:.3g}, limit {:.0e}", diff, limit);
  }
  return std::nullopt;
}

}  // namespace epkit::harness::conformance
