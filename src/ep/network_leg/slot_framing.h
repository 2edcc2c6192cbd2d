// The NCCL proxy backend's wire format (docs/ep-internode.md, "Rebuild",
// backend 2). NCCL's host API needs every receive's size before the call;
// the device posts puts of any size whenever it likes. So between two
// proxies every transfer is one slot of a fixed size: the receiver keeps
// receives of one slot posted and learns what arrived from the slot's
// header. A put larger than a slot's payload travels as several slots; its
// signal rides on the last one, so the receiver adds it only after every byte
// of the put has been applied.
//
// The receiving side treats each header as hostile: a peer with a bug (or a
// stray process on the port) must produce an error naming it, never a write
// outside a window, a signal that goes backwards, or a put stitched together
// from two. Per (peer, stream) slots arrive in order (NCCL orders sends
// between two ranks of one communicator), so the receiver checks sequence
// numbers instead of reordering.
//
// Two streams per peer: data (slots with payload, on the data communicator)
// and control (bare signals, credits; header only, on a second communicator
// so that they never queue behind data).
#pragma once

#include <epkit/result.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ep/network_leg/leg.h"

namespace epkit::ep::network_leg {

/// A slot's header, at the start of every slot. Fixed widths, no padding,
/// little-endian (every GPU host epkit runs on); 64 bytes so the payload
/// after it stays 16-byte aligned.
struct SlotHeader {
  static constexpr std::uint32_t k_magic = 0x534b5045;  // "EPKS"
  static constexpr std::uint16_t k_version = 1;
  /// flags: this slot ends its put (its signal, if any, is added after it).
  static constexpr std::uint16_t k_last = 1;

  std::uint32_t magic = k_magic;
  std::uint16_t version = k_version;
  std::uint16_t flags = 0;
  std::int32_t src_rank = -1;
  std::uint32_t channel = 0;
  std::uint64_t sequence = 0;  ///< per (source, destination, stream), from 0, one per slot
  std::uint32_t dst_window = 0;
  std::uint32_t payload = 0;  ///< bytes of this put in this slot
  std::uint64_t dst_offset = 0;
  std::uint32_t signal = 0;
  std::uint32_t reserved = 0;
  std::uint64_t signal_add = 0;  ///< 0: no signal; only on the last slot of a put
  std::uint64_t check = 0;  ///< header_check() of the fields above: a torn or stray header fails
};
static_assert(sizeof(SlotHeader) == 64, "SlotHeader is a wire format: keep its layout");

/// A checksum of every field but `check` (FNV-1a over the bytes): it catches
/// torn or foreign data, not a peer that means harm (the bounds checks do).
std::uint64_t header_check(const SlotHeader& header);

enum class SlotStream : std::uint8_t { data, control };

/// Slot size, header included. Both ends must agree (traded at exchange).
struct SlotGeometry {
  std::uint32_t slot_bytes = 0;
  std::uint32_t payload_bytes() const { return slot_bytes - sizeof(SlotHeader); }
  /// A multiple of 16 from 128 bytes to 64 MiB; otherwise invalid, naming
  /// the value.
  static Result<SlotGeometry> make(std::uint64_t slot_bytes);
};

/// One slot the sender will send: its header (check filled in), and where
/// its payload comes from in the sender's own windows.
struct PlannedSlot {
  SlotStream stream = SlotStream::data;
  SlotHeader header;
  WindowId src_window;
  std::uint64_t src_offset = 0;
};

/// The sender's half: numbers every slot to each peer, per stream.
class SlotPlanner {
 public:
  SlotPlanner(int rank, int world_size, SlotGeometry geometry);
  /// The slots of one put (in send order). A put of 0 bytes is one
  /// control slot (a bare signal); otherwise ceil(bytes / payload) data
  /// slots, the signal on the last. Invalid: a peer outside the world or this
  /// rank itself (its own node's rows never cross the network), a put of no
  /// bytes and no signal, offsets that overflow.
  Result<std::vector<PlannedSlot>> plan(const PutRequest& request);

 private:
  int m_rank;
  int m_world;
  SlotGeometry m_geometry;
  std::vector<std::uint64_t> m_data_sequence;     // by peer
  std::vector<std::uint64_t> m_control_sequence;  // by peer
};

/// What the receiver does with an accepted slot: copy `payload` bytes from
/// the slot (after its header) into `dst_window` at `dst_offset`, then, if
/// `write_signal`, set signal `signal` to `signal_value` (absolute: this rank's
/// proxy is its signals' only writer, and a value written twice does no
/// harm), after the copy is complete.
struct SlotAction {
  WindowId dst_window;
  std::uint64_t dst_offset = 0;
  std::uint32_t payload = 0;
  bool write_signal = false;
  SignalId signal;
  std::uint64_t signal_value = 0;
};

/// The receiver's half: checks each slot from a peer against this rank's
/// windows and signals and the peer's previous slots.
class SlotReceiver {
 public:
  /// `window_bytes[w]`: the size of this rank's window w; `num_signals`: its
  /// signal array's length.
  SlotReceiver(int rank, int world_size, SlotGeometry geometry,
               std::vector<std::uint64_t> window_bytes, std::uint32_t num_signals);
  /// Accepts the slot `peer` sent on `stream` (the raw bytes received:
  /// at least the header). An error names the peer and what was wrong; after
  /// one, the peer's stream is poisoned (every later slot refused too: the
  /// sequence can no longer be trusted).
  Result<SlotAction> accept(int peer, SlotStream stream, std::span<const std::byte> slot);
  /// The same for a header already read to the host from a slot of
  /// `received` bytes (the payload stays where it landed).
  Result<SlotAction> accept(int peer, SlotStream stream, const SlotHeader& header,
                            std::size_t received);
  /// Signal values as applied so far (the proxy's shadow of the array).
  std::uint64_t signal_value(SignalId signal) const { return m_signals.at(signal.value); }

 private:
  struct PeerState {
    std::uint64_t expected = 0;  // next sequence number
    bool poisoned = false;
    // A put that has sent some of its slots: the next data slot continues it.
    bool open = false;
    std::uint32_t window = 0;
    std::uint64_t next_offset = 0;
    std::uint32_t channel = 0;
  };
  Result<SlotAction> check(int peer, SlotStream stream, const SlotHeader& header, std::size_t size,
                           PeerState& state);

  int m_rank;
  int m_world;
  SlotGeometry m_geometry;
  std::vector<std::uint64_t> m_window_bytes;
  std::vector<std::uint64_t> m_signals;
  std::vector<PeerState> m_data;
  std::vector<PeerState> m_control;
};

}  // namespace epkit::ep::network_leg
