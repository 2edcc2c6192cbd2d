// Ring mode's count message as hostile input (ring_kernels.h, RingShape's
// message fields): the first check a message fails, in the order the count
// phase applies them, host and device code so the CPU tests reach every
// refusal (tests/ep/ring_messages_test.cc). A fault names the field (its
// channel or expert in `index`) and the value found; the host words it with
// leg_message_error (checks.h).
#pragma once

#include <cstdint>

#include "ep/internode/leg_counts.h"
#include "ep/internode/ring_kernels.h"

namespace epkit::ep::kernels {

/// `msg` holds s.message_ints ints from one sender for count phase `number`:
/// the phase first and last, per channel the rows to this rank (0 to
/// max_tokens) and the rows of the sender's stream to this node (no fewer,
/// at most max_tokens), the rows' sum and the streams' sum each at most
/// max_tokens (index C), and the tokens per local expert (0 to max_tokens).
EPKIT_HOST_DEVICE inline LegMessageFault check_ring_message(const std::int32_t* msg,
                                                            const RingShape& s,
                                                            std::int32_t number) {
  LegMessageFault f;
  const auto fault = [&](int kind, int index, long long value) {
    f.kind = kind;
    f.index = index;
    f.value = static_cast<std::int32_t>(value > 0x7fffffffLL ? 0x7fffffffLL : value);
    return f;
  };
  const int C = s.channels;
  if (msg[0] != number || msg[s.message_ints - 1] != number)
    return fault(LegMessageFault::sequence, 0, msg[0] != number ? msg[0] : msg[s.message_ints - 1]);
  long long rows = 0;
  long long streams = 0;
  for (int c = 0; c < C; ++c) {
    const int r = msg[s.msg_rows(c)];
    const int nr = msg[s.msg_node_rows(c)];
    if (r < 0 || r > s.max_tokens) return fault(LegMessageFault::ring_rows, c, r);
    if (nr < r || nr > s.max_tokens) return fault(LegMessageFault::stream_rows, c, nr);
    rows += r;
    streams += nr;
  }
  if (rows > s.max_tokens) return fault(LegMessageFault::ring_rows, C, rows);
  if (streams > s.max_tokens) return fault(LegMessageFault::stream_rows, C, streams);
  for (int e = 0; e < s.experts_per_rank; ++e) {
    const int v = msg[s.msg_experts(e)];
    if (v < 0 || v > s.max_tokens) return fault(LegMessageFault::expert_tokens, e, v);
  }
  return f;
}

}  // namespace epkit::ep::kernels
