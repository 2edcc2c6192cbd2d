#include "ep/network_leg/sizing.h"

#include <fmt/format.h>

namespace epkit::ep::network_leg {
namespace {

constexpr std::size_t align16(std::size_t n) {
  return (n + 15) / 16 * 16;
}

// Per (peer, channel): head, tail, credit and a spare 64-bit signal, each on
// its own 16 bytes so a signal write never shares a word with a polled one.
constexpr std::size_t kSignalBytesPerPeerChannel = 64;
// Source meta of a row: the source token index and a bitmask of the
// destination node's local ranks (G <= 8 fits, as DeepEP V1's 8 bytes).
constexpr std::size_t kSourceMetaBytes = 8;

Result<void> check_range(const char* name, long value, long low, long high) {
  if (value < low || value > high) {
    return make_error(
        ErrorCode::invalid,
        fmt::format("network leg sizing: {} = {} is outside [{}, {}]", name, value, low, high));
  }
  return {};
}

}  // namespace

Result<LegBytes> size_leg(const LegShape& s) {
  EPKIT_TRY(check_range("ranks_per_node", s.ranks_per_node, 1, 8));
  EPKIT_TRY(check_range("nodes", s.nodes, 1, 1024));
  EPKIT_TRY(check_range("hidden", s.hidden, 1, 1 << 20));
  EPKIT_TRY(check_range("topk", s.topk, 1, 128));
  EPKIT_TRY(check_range("num_experts", s.num_experts, 1, 1 << 16));
  EPKIT_TRY(check_range("max_tokens", s.max_tokens, 1, 1 << 24));
  EPKIT_TRY(check_range("element_bytes", s.element_bytes, 1, 2));
  EPKIT_TRY(check_range("channels", s.channels, 1, 1024));
  EPKIT_TRY(check_range("chunk_slots", s.chunk_slots, 1, 1 << 16));
  EPKIT_TRY(check_range("network_ring_slots", s.network_ring_slots, 1, 1 << 20));
  EPKIT_TRY(check_range("nvl_ring_slots", s.nvl_ring_slots, s.chunk_slots, 1 << 20));

  const auto C = static_cast<std::size_t>(s.channels);
  const auto G = static_cast<std::size_t>(s.ranks_per_node);
  const auto N = static_cast<std::size_t>(s.nodes);
  const auto H = static_cast<std::size_t>(s.hidden);
  const auto k = static_cast<std::size_t>(s.topk);
  const auto T = static_cast<std::size_t>(s.max_tokens);
  const auto E = static_cast<std::size_t>(s.num_experts);

  LegBytes b;
  const std::size_t scales = s.element_bytes == 1 ? 4 * ((H + 127) / 128) : 0;
  b.row_pitch = align16(H * static_cast<std::size_t>(s.element_bytes) + scales + 4 * k + 4 * k +
                        kSourceMetaBytes);

  const std::size_t remote = N - 1;
  if (remote > 0) {
    b.slots_per_peer = s.network_ring_slots / static_cast<int>(remote);
    if (b.slots_per_peer < 2 * s.chunk_slots) {
      return make_error(
          ErrorCode::invalid,
          fmt::format("network leg sizing: {} network ring slots per channel leave {} per remote "
                      "node at {} nodes, fewer than two chunks of {}; raise network_ring_slots to "
                      "at least {}",
                      s.network_ring_slots, b.slots_per_peer, s.nodes, s.chunk_slots,
                      2 * s.chunk_slots * static_cast<int>(remote)));
    }
  }
  b.network_rings = 2 * C * remote * static_cast<std::size_t>(b.slots_per_peer) * b.row_pitch;
  b.nvl_rings = C * G * static_cast<std::size_t>(s.nvl_ring_slots) * b.row_pitch;
  b.counters = C * remote * kSignalBytesPerPeerChannel + C * G * (2 * N + 3) * sizeof(std::int32_t);
  b.count_messages = 2 * (N * (G + 1) + E) * sizeof(std::int32_t);
  b.token_routing = T * (N + G) * sizeof(std::int32_t);
  b.total = b.network_rings + b.nvl_rings + b.counters + b.count_messages + b.token_routing;
  return b;
}

}  // namespace epkit::ep::network_leg
