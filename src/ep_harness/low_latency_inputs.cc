#include "ep_harness/low_latency_inputs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ep_harness/conformance_checks.h"

namespace epkit::harness {
namespace {

// splitmix64: a counter-based stream, the same on every host.
class Random {
 public:
  explicit Random(std::uint64_t seed) : m_state(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (m_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() {
    const double u = 1.0 - uniform();  // (0, 1]
    const double v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<std::uint64_t>(n)); }

 private:
  std::uint64_t m_state;
};

}  // namespace

LowLatencyInputs make_low_latency_inputs(const LowLatencyInputOptions& o) {
  namespace cf = conformance;
  Random rng(o.seed * 0x100000001b3ull + static_cast<std::uint64_t>(o.rank) + 1);
  const auto tokens = static_cast<std::size_t>(std::max(o.num_tokens, 0));
  const auto hidden = static_cast<std::size_t>(o.hidden);
  const auto topk = static_cast<std::size_t>(o.num_topk);
  LowLatencyInputs in;
  in.x.resize(tokens * hidden);
  for (std::size_t t = 0; t < tokens; ++t) {
    for (std::size_t h = 0; h < hidden; ++h) {
      float v;
      if (o.rank_constant) {
        v = h + 128 >= hidden ? static_cast<float>(t)
                              : static_cast<float>(o.rank - k_low_latency_rank_offset);
      } else {
        v = static_cast<float>(rng.normal()) * 0.1f;
      }
      in.x[t * hidden + h] = cf::float_to_bf16(v);
    }
  }
  in.topk_idx.resize(tokens * topk);
  in.topk_weights.resize(tokens * topk);
  std::vector<float> scores(static_cast<std::size_t>(o.num_experts));
  std::vector<int> order(scores.size());
  for (std::size_t t = 0; t < tokens; ++t) {
    for (auto& s : scores) s = static_cast<float>(std::fabs(rng.normal())) + 1.0f;
    std::iota(order.begin(), order.end(), 0);
    // The k largest scores, largest first (ties: the smaller expert).
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(topk), order.end(),
                      [&](int a, int b) {
                        const float sa = scores[static_cast<std::size_t>(a)];
                        const float sb = scores[static_cast<std::size_t>(b)];
                        return sa != sb ? sa > sb : a < b;
                      });
    for (std::size_t k = 0; k < topk; ++k) {
      in.topk_idx[t * topk + k] = o.mask_all ? -1 : order[k];
      in.topk_weights[t * topk + k] = static_cast<float>(std::fabs(rng.normal()));
    }
  }
  for (int i = 0; i < o.masked_slots && tokens > 0; ++i) {
    const auto t = static_cast<std::size_t>(rng.below(static_cast<int>(tokens)));
    const auto k = static_cast<std::size_t>(rng.below(static_cast<int>(topk)));
    in.topk_idx[t * topk + k] = -1;
  }
  return in;
}

}  // namespace epkit::harness
