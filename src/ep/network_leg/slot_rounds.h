// The NCCL proxy backend's transport, apart from NCCL (docs/ep-internode.md,
// "The NCCL transport under that interface"). NCCL's two-sided calls need
// equal sizes on both sides and a receive posted alone holds its stream, so
// slots travel in matched rounds:
//
// - control rounds, back to back for the Buffer's life: every rank sends
//   every peer one fixed-size ControlBlock and receives one. A block carries
//   the receives its sender has posted for the peer since its last block
//   (credits, per stream), the number of data slots it sends the peer in
//   this round's data phase (never more than the peer's credits), and up to
//   k_inline_control control slots (bare signals) inline;
// - a data phase after a control round, only between pairs that announced
//   slots: each data slot is one full slot sent straight from the sender's
//   staging into a receive the receiver has posted (the credit promised it),
//   so both sides know every size from the control round and nothing is
//   copied on the way.
//
// What carries a round is injected (RoundExchange): NCCL's grouped
// ncclSend/ncclRecv on a GPU, an in-memory hub in the CPU tests. Blocks from
// a peer are checked as hostile (round number, counts within the credits
// given), and a bad one fails the transport naming the peer.
#pragma once

#include <epkit/result.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "ep/network_leg/slot_framing.h"
#include "ep/network_leg/slot_proxy.h"

namespace epkit::ep::network_leg {

/// One peer's part of a round: one send and one receive, either may be 0
/// bytes (then not posted). Several parts may name one peer; those run in
/// order.
struct RoundPart {
  int peer = 0;
  const std::byte* send = nullptr;
  std::size_t send_bytes = 0;
  std::byte* recv = nullptr;
  std::size_t recv_bytes = 0;
};

/// The control exchange is given host memory (its NCCL implementation
/// stages the blocks through device memory of its own); the data exchange
/// the slots' own memory (the proxy's staging and receive slots).
class RoundExchange {
 public:
  virtual ~RoundExchange() = default;
  /// Posts a round as one group. The peer posts the mirror sizes.
  virtual Result<void> post(std::span<const RoundPart> parts) = 0;
  /// Whether the posted round finished. An error: it cannot (a peer gone),
  /// with failed_peer() naming it where known.
  virtual Result<bool> done() = 0;
  virtual int failed_peer() const { return -1; }
};

/// A control round's message to one peer. Fixed layout (a wire format).
struct ControlBlock {
  static constexpr std::uint32_t k_magic = 0x434b5045;  // "EPKC"
  static constexpr std::uint32_t k_inline_control = 4;
  std::uint32_t magic = k_magic;
  std::uint32_t sender = 0;
  std::uint64_t round = 0;
  std::uint32_t data_credits = 0;     ///< data receives newly posted for the peer
  std::uint32_t control_credits = 0;  ///< control receives newly posted for the peer
  std::uint32_t data_slots = 0;       ///< data slots this round's data phase sends the peer
  std::uint32_t control_count = 0;    ///< control slots inline below
  SlotHeader control[k_inline_control];
};
static_assert(sizeof(ControlBlock) == 32 + 4 * sizeof(SlotHeader), "ControlBlock is a wire format");

class RoundTransport final : public SlotTransport {
 public:
  /// `max_data_slots`: most data slots to one peer in one round.
  /// `memory`'s read_header and write_header move control slots between
  /// slot memory and the blocks (the other calls are not used). A round not
  /// finished within `round_timeout_ns` (on `clock_ns`, steady_clock when
  /// empty) fails the transport.
  RoundTransport(int rank, int world_size, SlotGeometry geometry, std::uint32_t max_data_slots,
                 RoundExchange& control, RoundExchange& data, SlotMemory memory,
                 std::int64_t round_timeout_ns, std::function<std::int64_t()> clock_ns = {});

  Result<void> post_send(int peer, SlotStream stream, const std::byte* slot, std::size_t bytes,
                         std::uint64_t tag) override;
  Result<void> post_recv(int peer, SlotStream stream, std::byte* slot, std::size_t bytes,
                         std::uint64_t tag) override;
  /// Moves the rounds on (posts the next one when the last finished).
  Result<std::vector<SlotCompletion>> poll() override;
  int failed_peer() const override { return m_failed_peer; }
  std::uint64_t rounds() const { return m_round; }

 private:
  struct Op {
    const std::byte* send = nullptr;
    std::byte* recv = nullptr;
    std::uint64_t tag = 0;
  };
  struct Peer {
    std::deque<Op> data_out, control_out;                           // sends not yet in a round
    std::deque<Op> data_in, control_in;                             // receives not yet filled
    std::uint32_t data_unadvertised = 0, control_unadvertised = 0;  // posted, not yet told the peer
    std::uint32_t data_credit = 0, control_credit = 0;  // the peer's receives we may fill
    std::uint32_t data_promised = 0,
                  control_promised = 0;  // ours we told the peer of, not yet filled
    ControlBlock out, in;
    std::vector<Op> sending_data, sending_control;  // in this round
  };
  enum class Phase { idle, control, data };
  Result<void> post_control();
  Result<void> finish_control(std::vector<SlotCompletion>& done);
  Result<void> fail(int peer, std::string reason);
  bool is_peer(int peer) const { return peer >= 0 && peer < m_world && peer != m_rank; }
  Peer& peer_state(int peer) { return m_peers[static_cast<std::size_t>(peer)]; }

  int m_rank;
  int m_world;
  SlotGeometry m_geometry;
  std::uint32_t m_max_data;
  RoundExchange* m_control;
  RoundExchange* m_data;
  SlotMemory m_memory;
  std::vector<Peer> m_peers;
  Phase m_phase = Phase::idle;
  // Every round is bounded: a peer that stops taking part leaves the round
  // unfinished for ever, which NCCL alone does not report.
  std::int64_t m_timeout_ns;
  std::function<std::int64_t()> m_clock;
  std::int64_t m_phase_started = 0;
  std::uint64_t m_round = 0;
  std::vector<SlotCompletion> m_data_done;  // completions when the data phase ends
  int m_failed_peer = -1;
  bool m_failed = false;
  std::string m_failure;
};

}  // namespace epkit::ep::network_leg
