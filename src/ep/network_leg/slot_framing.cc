#include "ep/network_leg/slot_framing.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <utility>

namespace epkit::ep::network_leg {

namespace {

constexpr std::uint64_t k_min_slot = 128;
constexpr std::uint64_t k_max_slot = 64ull << 20;

const char* stream_name(SlotStream stream) {
  return stream == SlotStream::data ? "data" : "control";
}

}  // namespace

std::uint64_t header_check(const SlotHeader& header) {
  unsigned char bytes[sizeof(SlotHeader)];
  std::memcpy(bytes, &header, sizeof(header));
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < offsetof(SlotHeader, check); ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

Result<SlotGeometry> SlotGeometry::make(std::uint64_t slot_bytes) {
  if (slot_bytes < k_min_slot || slot_bytes > k_max_slot || slot_bytes % 16 != 0) {
    return make_error(ErrorCode::invalid,
                      fmt::format("slot size {} bytes: a multiple of 16 from {} to {}", slot_bytes,
                                  k_min_slot, k_max_slot));
  }
  return SlotGeometry{static_cast<std::uint32_t>(slot_bytes)};
}

SlotPlanner::SlotPlanner(int rank, int world_size, SlotGeometry geometry)
    : m_rank(rank),
      m_world(world_size),
      m_geometry(geometry),
      m_data_sequence(static_cast<std::size_t>(world_size > 0 ? world_size : 0)),
      m_control_sequence(m_data_sequence.size()) {}

Result<std::vector<PlannedSlot>> SlotPlanner::plan(const PutRequest& request) {
  if (request.peer < 0 || request.peer >= m_world || request.peer == m_rank) {
    return make_error(
        ErrorCode::invalid,
        fmt::format("a put to rank {} from rank {} of {}: not a peer across the network",
                    request.peer, m_rank, m_world));
  }
  if (request.bytes == 0 && request.signal_add == 0) {
    return make_error(ErrorCode::invalid, "a put of no bytes and no signal");
  }
  constexpr auto k_max = std::numeric_limits<std::uint64_t>::max();
  if (request.dst_offset > k_max - request.bytes || request.src_offset > k_max - request.bytes) {
    return make_error(ErrorCode::invalid, "a put whose offsets overflow");
  }
  const auto peer = static_cast<std::size_t>(request.peer);
  // One slot of the put; the last carries its signal. A put of 0 bytes is
  // one control slot.
  auto slot_at = [&](SlotStream stream, std::uint64_t done, std::uint64_t n) {
    PlannedSlot slot;
    slot.stream = stream;
    auto& sequence = stream == SlotStream::data ? m_data_sequence[peer] : m_control_sequence[peer];
    SlotHeader& h = slot.header;
    h.src_rank = m_rank;
    h.channel = request.channel;
    h.sequence = sequence++;
    h.dst_window = request.dst_window.value;
    h.payload = static_cast<std::uint32_t>(n);
    h.dst_offset = request.dst_offset + done;
    slot.src_window = request.src_window;
    slot.src_offset = request.src_offset + done;
    if (done + n == request.bytes) {
      h.flags = SlotHeader::k_last;
      h.signal = request.signal.value;
      h.signal_add = request.signal_add;
    }
    h.check = header_check(h);
    return slot;
  };
  std::vector<PlannedSlot> slots;
  if (request.bytes == 0) {
    slots.push_back(slot_at(SlotStream::control, 0, 0));
    return slots;
  }
  const std::uint64_t payload = m_geometry.payload_bytes();
  slots.reserve(static_cast<std::size_t>((request.bytes + payload - 1) / payload));
  for (std::uint64_t done = 0; done < request.bytes; done += payload) {
    slots.push_back(slot_at(SlotStream::data, done, std::min(payload, request.bytes - done)));
  }
  return slots;
}

SlotReceiver::SlotReceiver(int rank, int world_size, SlotGeometry geometry,
                           std::vector<std::uint64_t> window_bytes, std::uint32_t num_signals)
    : m_rank(rank),
      m_world(world_size),
      m_geometry(geometry),
      m_window_bytes(std::move(window_bytes)),
      m_signals(num_signals, 0),
      m_data(static_cast<std::size_t>(world_size > 0 ? world_size : 0)),
      m_control(m_data.size()) {}

Result<SlotAction> SlotReceiver::accept(int peer, SlotStream stream,
                                        std::span<const std::byte> slot) {
  SlotHeader header;
  if (slot.size() >= sizeof(SlotHeader)) std::memcpy(&header, slot.data(), sizeof(header));
  return accept(peer, stream, header, slot.size());
}

Result<SlotAction> SlotReceiver::accept(int peer, SlotStream stream, const SlotHeader& header,
                                        std::size_t received) {
  if (peer < 0 || peer >= m_world || peer == m_rank) {
    return make_error(
        ErrorCode::invalid,
        fmt::format("a slot from rank {}, not a peer of rank {} of {}", peer, m_rank, m_world));
  }
  PeerState& state =
      (stream == SlotStream::data ? m_data : m_control)[static_cast<std::size_t>(peer)];
  if (state.poisoned) {
    return make_error(
        ErrorCode::invalid,
        fmt::format("rank {}'s {} stream was refused before: its later slots are not trusted", peer,
                    stream_name(stream)));
  }
  Result<SlotAction> out =
      received < sizeof(SlotHeader)
          ? Result<SlotAction>(make_error(ErrorCode::invalid,
                                          fmt::format("{} bytes, less than a header", received)))
          : check(peer, stream, header, received, state);
  if (!out.ok()) {
    state.poisoned = true;
    return make_error(ErrorCode::invalid,
                      fmt::format("rank {} sent rank {} a bad {} slot: {}", peer, m_rank,
                                  stream_name(stream), out.error().message));
  }
  return out;
}

Result<SlotAction> SlotReceiver::check(int peer, SlotStream stream, const SlotHeader& h,
                                       std::size_t size, PeerState& state) {
  if (h.magic != SlotHeader::k_magic || h.version != SlotHeader::k_version) {
    return make_error(ErrorCode::invalid, fmt::format("not an epkit slot (magic {:#x}, version {})",
                                                      h.magic, h.version));
  }
  if (h.check != header_check(h)) return make_error(ErrorCode::invalid, "header checksum mismatch");
  if (h.src_rank != peer) {
    return make_error(ErrorCode::invalid,
                      fmt::format("it names rank {} as its sender", h.src_rank));
  }
  if (h.sequence != state.expected) {
    return make_error(ErrorCode::invalid,
                      fmt::format("sequence {} where {} was due", h.sequence, state.expected));
  }
  if ((h.flags & ~SlotHeader::k_last) != 0 || h.reserved != 0) {
    return make_error(ErrorCode::invalid, fmt::format("unknown flags {:#x}", h.flags));
  }
  const bool last = (h.flags & SlotHeader::k_last) != 0;
  if (h.payload > m_geometry.payload_bytes() || size < sizeof(SlotHeader) + h.payload ||
      size > m_geometry.slot_bytes) {
    return make_error(ErrorCode::invalid,
                      fmt::format("payload {} in a slot of {} bytes (at most {})", h.payload, size,
                                  m_geometry.slot_bytes));
  }
  if (stream == SlotStream::control && (h.payload != 0 || !last || h.signal_add == 0)) {
    return make_error(ErrorCode::invalid, "a control slot carries one signal and no bytes");
  }
  if (stream == SlotStream::data && h.payload == 0) {
    return make_error(ErrorCode::invalid, "a data slot without bytes");
  }
  if (!last && h.signal_add != 0) {
    return make_error(ErrorCode::invalid, "a signal before the last slot of its put");
  }
  if (state.open && (h.dst_window != state.window || h.dst_offset != state.next_offset ||
                     h.channel != state.channel)) {
    return make_error(
        ErrorCode::invalid,
        fmt::format("window {} offset {} does not continue its put (window {} offset {})",
                    h.dst_window, h.dst_offset, state.window, state.next_offset));
  }
  if (h.payload > 0) {
    if (h.dst_window >= m_window_bytes.size()) {
      return make_error(ErrorCode::invalid,
                        fmt::format("window {} of {}", h.dst_window, m_window_bytes.size()));
    }
    const std::uint64_t limit = m_window_bytes[h.dst_window];
    if (h.dst_offset > limit || h.payload > limit - h.dst_offset) {
      return make_error(ErrorCode::invalid,
                        fmt::format("{} bytes at offset {} of window {} ({} bytes)", h.payload,
                                    h.dst_offset, h.dst_window, limit));
    }
  }
  SlotAction action;
  action.dst_window = WindowId{h.dst_window};
  action.dst_offset = h.dst_offset;
  action.payload = h.payload;
  if (h.signal_add != 0) {
    if (h.signal >= m_signals.size()) {
      return make_error(ErrorCode::invalid,
                        fmt::format("signal {} of {}", h.signal, m_signals.size()));
    }
    std::uint64_t& value = m_signals[h.signal];
    if (h.signal_add > std::numeric_limits<std::uint64_t>::max() - value) {
      return make_error(ErrorCode::invalid, fmt::format("signal {} at {} would wrap adding {}",
                                                        h.signal, value, h.signal_add));
    }
    value += h.signal_add;
    action.write_signal = true;
    action.signal = SignalId{h.signal};
    action.signal_value = value;
  }
  ++state.expected;
  state.open = !last;
  state.window = h.dst_window;
  state.next_offset = h.dst_offset + h.payload;
  state.channel = h.channel;
  return action;
}

}  // namespace epkit::ep::network_leg
