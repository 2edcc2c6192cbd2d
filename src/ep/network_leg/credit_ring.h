// A credit ring over the network leg: the rebuilt internode mode's unit of
// fixed memory (docs/ep-internode.md, "Normal mode's protocol"). Messages of
// at most `slot_bytes` go from one rank to one peer through `slots` slots:
// message i is written into slot i % slots of the sender's send area and put
// into the same slot of the receiver's area, adding 1 to that slot's tail
// signal at the receiver. A signal per slot, not one per ring, because puts
// may land out of order: slot s's tail counts its laps, so message i has
// landed once it reaches i / slots + 1, and message i + slots cannot land
// before message i was consumed, since the sender waits for that credit.
// The receiver returns credits (an add on the sender's credit signal, in
// messages consumed) every `credit_every` messages and at the end, one
// message a batch rather than one a row. Progress needs credit_every <=
// slots: the sender waiting for message i's room needs i + 1 - slots
// messages credited, and a receiver that consumed every message sent has
// credited at least i + 1 - credit_every of them.
//
// Every count is monotone across calls (a ring's message number goes on from
// call to call, as the leg's exchange numbers do), so the signals are never
// reset and a captured call replays with the next numbers. The same code runs
// in kernels and on host threads (CPU tests), over device_calls.h's shim.
#pragma once

#include <cstdint>

#include "ep/network_leg/device_calls.h"
#include "ep/network_leg/leg.h"

namespace epkit::ep::network_leg {

/// One direction of one (sender, receiver) pair, as both ends see it. The
/// caller lays the areas out so that every tail and credit signal has one
/// writer: the tails by sender, the credits by receiver.
struct CreditRing {
  std::uint32_t slots = 0;
  std::uint32_t credit_every = 1;
  std::uint64_t slot_bytes = 0;
  /// The sender's outgoing slots: slot s at send_offset + s x slot_bytes.
  WindowId send_window;
  std::uint64_t send_offset = 0;
  /// The receiver's slots for this sender, likewise.
  WindowId recv_window;
  std::uint64_t recv_offset = 0;
  /// At the receiver: slot s's tail is signal tail + s.
  SignalId tail;
  /// At the sender: the messages this receiver has consumed.
  SignalId credit;
};

/// Whether the shape can make progress: at least one slot, 1 <= credit_every
/// <= slots, slots of at least one byte.
EPKIT_LEG_CALL bool ring_valid(const CreditRing& r) {
  return r.slots >= 1 && r.credit_every >= 1 && r.credit_every <= r.slots && r.slot_bytes >= 1;
}

EPKIT_LEG_CALL std::uint32_t ring_slot(const CreditRing& r, std::uint64_t i) {
  return static_cast<std::uint32_t>(i % r.slots);
}
EPKIT_LEG_CALL std::uint64_t ring_send_offset(const CreditRing& r, std::uint64_t i) {
  return r.send_offset + ring_slot(r, i) * r.slot_bytes;
}
EPKIT_LEG_CALL std::uint64_t ring_recv_offset(const CreditRing& r, std::uint64_t i) {
  return r.recv_offset + ring_slot(r, i) * r.slot_bytes;
}
/// The tail signal message i adds 1 to at the receiver.
EPKIT_LEG_CALL SignalId ring_tail(const CreditRing& r, std::uint64_t i) {
  return SignalId{r.tail.value + ring_slot(r, i)};
}

/// Sender: waits until message i may be written into its slot (the receiver
/// consumed message i - slots, so that slot's last put has landed and its
/// source was read). False on expiry, or at once when `peer` (the receiver,
/// if given) exited (leg_wait).
EPKIT_LEG_CALL bool ring_wait_room(const DeviceLeg& leg, const CreditRing& r, std::uint64_t i,
                                   std::int64_t timeout_ns, int peer = -1) {
  if (i < r.slots) return true;
  return leg_wait(leg, r.credit, i + 1 - r.slots, timeout_ns, peer);
}

/// Sender: puts message i (`bytes` of its slot, at most slot_bytes) to
/// `peer`. Refused for a message larger than a slot.
EPKIT_LEG_CALL PostStatus ring_send(const DeviceLeg& leg, const CreditRing& r, int peer,
                                    std::uint64_t i, std::uint64_t bytes, std::int64_t timeout_ns,
                                    FlushMark* mark = nullptr) {
  if (bytes > r.slot_bytes) return PostStatus::refused;
  return leg_put(leg, peer, r.recv_window, ring_recv_offset(r, i), r.send_window,
                 ring_send_offset(r, i), bytes, ring_tail(r, i), 1, timeout_ns, mark);
}

/// Receiver: waits until message i has landed in its slot (`peer`: the
/// sender, if given, as for ring_wait_room).
EPKIT_LEG_CALL bool ring_wait_landed(const DeviceLeg& leg, const CreditRing& r, std::uint64_t i,
                                     std::int64_t timeout_ns, int peer = -1) {
  return leg_wait(leg, ring_tail(r, i), i / r.slots + 1, timeout_ns, peer);
}

/// Receiver: the credits owed once message i is consumed (0: none yet):
/// a batch of credit_every, or all owed when `last`. `credited` is the
/// receiver's running count of credited messages.
EPKIT_LEG_CALL std::uint64_t ring_credit_due(const CreditRing& r, std::uint64_t i, bool last,
                                             std::uint64_t credited) {
  const std::uint64_t consumed = i + 1;
  if (consumed <= credited) return 0;
  if (consumed - credited < r.credit_every && !last) return 0;
  return consumed - credited;
}

/// Receiver: message i was consumed (its slot may be rewritten). Returns a
/// batch's credits to `peer` once credit_every messages are owed, or all
/// that are owed when `last`; `credited` is the receiver's running count.
EPKIT_LEG_CALL PostStatus ring_consumed(const DeviceLeg& leg, const CreditRing& r, int peer,
                                        std::uint64_t i, bool last, std::uint64_t& credited,
                                        std::int64_t timeout_ns) {
  const std::uint64_t due = ring_credit_due(r, i, last, credited);
  if (due == 0) return PostStatus::posted;
  const PostStatus s = leg_signal(leg, peer, r.credit, due, timeout_ns);
  if (s == PostStatus::posted) credited += due;
  return s;
}

}  // namespace epkit::ep::network_leg

namespace epkit::ep::network_leg {

/// Rows through a credit ring: a call's `total` rows to one peer go as
/// chunks of `chunk_rows` rows (a ring message each, the last one short),
/// row j of the call in chunk j / chunk_rows at row j % chunk_rows of that
/// chunk's slot. `base` is the ring's message number at the call's start
/// (the chunks of earlier calls), so numbers go on from call to call. Both
/// ends know `total` (the count messages carry it), so no end marker
/// travels. A row of the call is a fixed `pitch` bytes.
struct RowStream {
  CreditRing ring;
  std::uint32_t chunk_rows = 1;
  std::uint64_t pitch = 0;
  std::uint64_t base = 0;
  std::uint64_t total = 0;
};

/// Whether the rows fit the ring's slots and the ring can progress.
EPKIT_LEG_CALL bool stream_valid(const RowStream& s) {
  return ring_valid(s.ring) && s.chunk_rows >= 1 && s.pitch >= 1 &&
         s.chunk_rows * s.pitch <= s.ring.slot_bytes;
}
/// The chunks the call's rows take, and so the ring's number after it.
EPKIT_LEG_CALL std::uint64_t stream_chunks(const RowStream& s) {
  return (s.total + s.chunk_rows - 1) / s.chunk_rows;
}
EPKIT_LEG_CALL std::uint64_t stream_message(const RowStream& s, std::uint64_t j) {
  return s.base + j / s.chunk_rows;
}
/// Row j's offset in the sender's send area and in the receiver's area.
EPKIT_LEG_CALL std::uint64_t stream_send_offset(const RowStream& s, std::uint64_t j) {
  return ring_send_offset(s.ring, stream_message(s, j)) + (j % s.chunk_rows) * s.pitch;
}
EPKIT_LEG_CALL std::uint64_t stream_recv_offset(const RowStream& s, std::uint64_t j) {
  return ring_recv_offset(s.ring, stream_message(s, j)) + (j % s.chunk_rows) * s.pitch;
}

/// Sender, before writing row j: the first row of a chunk waits for its
/// slot's room.
EPKIT_LEG_CALL bool stream_wait_room(const DeviceLeg& leg, const RowStream& s, std::uint64_t j,
                                     std::int64_t timeout_ns, int peer = -1) {
  if (j % s.chunk_rows != 0) return true;
  return ring_wait_room(leg, s.ring, stream_message(s, j), timeout_ns, peer);
}
/// Sender, after writing row j: the last row of a chunk (or of the call)
/// puts the chunk.
EPKIT_LEG_CALL PostStatus stream_row_written(const DeviceLeg& leg, const RowStream& s, int peer,
                                             std::uint64_t j, std::int64_t timeout_ns,
                                             FlushMark* mark = nullptr) {
  const bool chunk_end = (j + 1) % s.chunk_rows == 0 || j + 1 == s.total;
  if (!chunk_end) return PostStatus::posted;
  const std::uint64_t rows = j % s.chunk_rows + 1;
  return ring_send(leg, s.ring, peer, stream_message(s, j), rows * s.pitch, timeout_ns, mark);
}
/// Receiver, before reading row j: the first row of a chunk waits for it.
EPKIT_LEG_CALL bool stream_wait_row(const DeviceLeg& leg, const RowStream& s, std::uint64_t j,
                                    std::int64_t timeout_ns, int peer = -1) {
  if (j % s.chunk_rows != 0) return true;
  return ring_wait_landed(leg, s.ring, stream_message(s, j), timeout_ns, peer);
}
/// Receiver, after reading row j: the last row of a chunk frees its slot
/// (credits in batches, all owed at the call's last row). `credited`: the
/// receiver's running count of this ring's credited messages.
EPKIT_LEG_CALL PostStatus stream_row_read(const DeviceLeg& leg, const RowStream& s, int peer,
                                          std::uint64_t j, std::uint64_t& credited,
                                          std::int64_t timeout_ns) {
  const bool last = j + 1 == s.total;
  if ((j + 1) % s.chunk_rows != 0 && !last) return PostStatus::posted;
  return ring_consumed(leg, s.ring, peer, stream_message(s, j), last, credited, timeout_ns);
}

}  // namespace epkit::ep::network_leg
