#include "ep/low_latency/region.h"

#include <fmt/format.h>

#include <cstddef>

namespace epkit::ep::low_latency {
namespace {

constexpr std::int64_t k_align = 256;

std::int64_t align_up(std::int64_t v) {
  return (v + k_align - 1) / k_align * k_align;
}

Error bad_shape(std::string why) {
  return make_error(ErrorCode::invalid, std::move(why));
}

}  // namespace

Result<kernels::LowLatencyRegion> region_for(int max_tokens, int hidden, int num_ranks,
                                             int num_experts) {
  namespace k = kernels;
  if (max_tokens < 1 || max_tokens > (1 << 20))
    return bad_shape(
        fmt::format("num_max_dispatch_tokens_per_rank = {}: must be 1..{}", max_tokens, 1 << 20));
  if (hidden <= 0 || hidden % k::k_scale_block != 0 || hidden > (1 << 16))
    return bad_shape(fmt::format("hidden = {}: must be a positive multiple of {} up to {}", hidden,
                                 k::k_scale_block, 1 << 16));
  if (num_ranks < 1 || num_ranks > k::k_low_latency_max_ranks)
    return bad_shape(fmt::format("{} ranks: the low-latency mode spans 1 to {} ranks", num_ranks,
                                 k::k_low_latency_max_ranks));
  if (num_experts < 1 || num_experts > k::k_max_experts || num_experts % num_ranks != 0)
    return bad_shape(fmt::format("num_experts = {}: must be 1..{} and a multiple of the {} ranks",
                                 num_experts, k::k_max_experts, num_ranks));
  k::LowLatencyRegion r;
  r.max_tokens = max_tokens;
  r.hidden = hidden;
  r.num_ranks = num_ranks;
  r.num_experts = num_experts;
  r.local_experts = num_experts / num_ranks;
  r.num_scales = hidden / k::k_scale_block;
  r.rows_per_expert = static_cast<std::int64_t>(num_ranks) * max_tokens;
  // 16-byte aligned rows: the copy warps read them as vectors.
  r.cast_row_bytes = (hidden + 4 * static_cast<std::int64_t>(r.num_scales) + 15) / 16 * 16;
  r.cast_pitch = 2 * static_cast<std::int64_t>(hidden);  // >= cast_row_bytes (hidden >= 128)
  const std::int64_t L = r.local_experts;
  r.meta_pitch = (8 * (L + 1) + 4 * L * max_tokens + 15) / 16 * 16;
  const std::int64_t rows = static_cast<std::int64_t>(r.local_experts) * r.rows_per_expert;
  const std::int64_t tokens = max_tokens;
  std::int64_t at = align_up(static_cast<std::int64_t>(sizeof(k::LowLatencyHeader)));
  auto take = [&](std::int64_t bytes) {
    std::int64_t here = at;
    at = align_up(at + bytes);
    return here;
  };
  for (auto& b : r.buffer) {
    b.counts = take(static_cast<std::int64_t>(num_ranks) * num_experts * 4);
    b.recv_x = take(rows * hidden * 2);
    b.recv_scales = take(rows * r.num_scales * 4);
    b.scale_rows = take(rows * r.num_scales * 4);
    b.src_info = take(rows * 4);
    b.src_slot = take(rows * 4);
    b.layout_range = take(static_cast<std::int64_t>(r.local_experts) * num_ranks * 8);
    b.recv_count = take(static_cast<std::int64_t>(r.local_experts) * 4);
    b.combine_in = take(rows * hidden * 2);
    b.combine_rows = take(tokens * k::k_low_latency_max_topk * hidden * 2);
    b.combined = take(tokens * hidden * 2);
    b.cast = take(tokens * r.cast_pitch);
    b.stage = take(rows * hidden * 2);
    b.slice_meta = take(static_cast<std::int64_t>(num_ranks) * r.meta_pitch);
    b.send_meta = take(static_cast<std::int64_t>(num_ranks) * r.meta_pitch);
    b.combine_count = take(static_cast<std::int64_t>(num_ranks) * 16);
  }
  r.total = at;
  return r;
}

}  // namespace epkit::ep::low_latency
