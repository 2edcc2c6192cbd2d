#include "ep/internode/ring_memory.h"

#include <fmt/format.h>

#include <algorithm>

#include "ep/core/buffer_parts.h"
#include "ep/internode/buffer.h"

namespace epkit::ep {
namespace {

std::size_t align_up(std::size_t v) {
  return (v + 255) / 256 * 256;
}

}  // namespace

Result<RingMemory> ring_memory(const BufferOptions& o, int ranks) {
  const int per_node = std::max(o.ranks_per_node, 1);
  const int nodes = ranks / per_node;
  if (o.ring_channels < 1 || o.ring_channels > k::k_ring_max_channels)
    return invalid(fmt::format("BufferOptions.ring_channels = {}: must be 1 to {}", o.ring_channels,
                               k::k_ring_max_channels));
  if (o.ring_chunk_rows < 1 || o.ring_chunk_rows > 32)
    return invalid(
        fmt::format("BufferOptions.ring_chunk_rows = {}: must be 1 to 32", o.ring_chunk_rows));
  if (o.ring_network_rows < 2 * o.ring_chunk_rows || o.ring_network_rows > (1 << 20))
    return invalid(fmt::format(
        "BufferOptions.ring_network_rows = {}: must hold two chunks of {} rows, at most 2^20",
        o.ring_network_rows, o.ring_chunk_rows));
  if (o.ring_nvl_rows < 2 || o.ring_nvl_rows > (1 << 20))
    return invalid(
        fmt::format("BufferOptions.ring_nvl_rows = {}: must be 2 to 2^20", o.ring_nvl_rows));
  if (o.max_hidden < 1 || o.max_tokens < 1 || o.max_topk < 0 || o.max_topk > 32)
    return invalid("ring mode: max_tokens, max_hidden and max_topk (0..32) must be set");
  RingMemory m;
  k::RingShape& s = m.shape;
  s.nodes = nodes;
  s.per_node = per_node;
  s.channels = o.ring_channels;
  s.chunk_rows = o.ring_chunk_rows;
  // A channel's network rows are shared by the nodes (each ring at least two
  // chunks), a local rank's NVLink rows by the source nodes.
  s.net_chunks = std::max(2, o.ring_network_rows / (o.ring_chunk_rows * nodes));
  s.nvl_slots = std::max(2, o.ring_nvl_rows / nodes);
  s.slot_pitch = row_format(DType::bf16, o.max_hidden, 8, o.max_topk, true, per_node).pitch;
  m.max_experts_per_rank = k::k_max_experts / std::max(ranks, 1);
  s.message_ints = (k::RingShape::min_message_ints(s.channels, m.max_experts_per_rank) + 3) / 4 * 4;
  s.max_tokens = o.max_tokens;
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t here = at;
    at = align_up(at + bytes);
    return here;
  };
  const auto C = static_cast<std::size_t>(s.channels);
  const auto N = static_cast<std::size_t>(nodes);
  const auto G = static_cast<std::size_t>(per_node);
  const auto NC = static_cast<std::size_t>(s.net_chunks);
  const auto R = static_cast<std::size_t>(ranks);
  s.net_send = take(C * N * s.ring_bytes());
  s.net_recv = take(C * N * s.ring_bytes());
  s.messages_in = take(2 * R * static_cast<std::size_t>(s.message_ints) * 4);
  s.messages_out = take(R * static_cast<std::size_t>(s.message_ints) * 4);
  m.net_sent = take(C * N * 8);
  m.net_received = take(C * N * 8);
  m.net_credited = take(C * N * 8);
  m.nvl_written = take(C * G * N * 8);
  m.nvl_read = take(C * G * N * 8);
  m.phase = take(8);
  m.filling = take(C * N * NC * 4);
  m.draining = take(C * N * NC * 4);
  m.drained = take(C * N * NC * 8);
  m.counters_end = at;
  const auto T = static_cast<std::size_t>(o.max_tokens);
  m.out_x = take(T * static_cast<std::size_t>(o.max_hidden) * 2);
  m.out_w = take(T * static_cast<std::size_t>(o.max_topk) * 4);
  m.per_rank = take(R * 4);
  m.per_node = take(N * 4);
  m.per_expert = take(static_cast<std::size_t>(k::k_max_experts) * 4);
  m.in_rank = take(T * R);
  m.barrier = take(N * 4);
  m.leg_counters = take(4 * 4 * sizeof(std::uint64_t));
  m.leg_done = take(N * k::k_leg_chunks * sizeof(std::int32_t));
  m.total = at;
  m.nvl_bytes = align_up(static_cast<std::size_t>(s.nvl_bytes()));
  return m;
}

k::RingCounters ring_counters(const RingMemory& m, std::uint8_t* base) {
  k::RingCounters c;
  c.net_sent = reinterpret_cast<std::uint64_t*>(base + m.net_sent);
  c.net_received = reinterpret_cast<std::uint64_t*>(base + m.net_received);
  c.net_credited = reinterpret_cast<std::uint64_t*>(base + m.net_credited);
  c.nvl_written = reinterpret_cast<std::uint64_t*>(base + m.nvl_written);
  c.nvl_read = reinterpret_cast<std::uint64_t*>(base + m.nvl_read);
  c.phase = reinterpret_cast<std::uint64_t*>(base + m.phase);
  c.filling = reinterpret_cast<std::int32_t*>(base + m.filling);
  c.draining = reinterpret_cast<std::int32_t*>(base + m.draining);
  c.drained = reinterpret_cast<std::uint64_t*>(base + m.drained);
  return c;
}

}  // namespace epkit::ep
