// Ring mode's count messages as hostile input (ep/internode/ring_messages.h):
// a sound message passes; each field out of range is the fault named, with
// its channel or expert and the value, and the host's words say which rank
// and what.
#include "ep/internode/ring_messages.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ep/internode/checks.h"

namespace epkit::ep::kernels {
namespace {

using Fault = LegMessageFault;

RingShape shape() {
  RingShape s;
  s.channels = 3;
  s.experts_per_rank = 4;
  s.max_tokens = 100;
  s.message_ints = RingShape::min_message_ints(s.channels, s.experts_per_rank) + 2;
  return s;
}

// Phase 7: 10, 20, 5 rows to this rank, streams of 12, 20, 30 rows to its
// node, 3 tokens for each of its experts.
std::vector<std::int32_t> sound(const RingShape& s) {
  std::vector<std::int32_t> m(static_cast<std::size_t>(s.message_ints), 0);
  m.front() = m.back() = 7;
  const int rows[] = {10, 20, 5};
  const int streams[] = {12, 20, 30};
  for (int c = 0; c < s.channels; ++c) {
    m[static_cast<std::size_t>(s.msg_rows(c))] = rows[c];
    m[static_cast<std::size_t>(s.msg_node_rows(c))] = streams[c];
  }
  for (int e = 0; e < s.experts_per_rank; ++e) m[static_cast<std::size_t>(s.msg_experts(e))] = 3;
  return m;
}

TEST(RingMessages, ASoundMessagePasses) {
  const RingShape s = shape();
  EXPECT_EQ(check_ring_message(sound(s).data(), s, 7).kind, Fault::none);
}

TEST(RingMessages, EachBadFieldIsTheFaultNamed) {
  const RingShape s = shape();
  struct Case {
    int field;
    std::int32_t value;
    int kind;
    int index;
    const char* words;
  };
  const Case cases[] = {
      {0, 6, Fault::sequence, 0, "belongs to another call"},
      {-1, 8, Fault::sequence, 0, "belongs to another call"},
      {s.msg_rows(1), -1, Fault::ring_rows, 1, "announced -1 rows to this rank in channel 1"},
      {s.msg_rows(2), 101, Fault::ring_rows, 2, "announced 101 rows to this rank in channel 2"},
      {s.msg_node_rows(0), 9, Fault::stream_rows, 0,
       "a stream of 9 rows to this node in channel 0"},
      {s.msg_node_rows(2), 101, Fault::stream_rows, 2, "a stream of 101 rows"},
      {s.msg_rows(0), 80, Fault::stream_rows, 0, "a stream of 12 rows"},  // longer than its stream
      {s.msg_node_rows(2), 69, Fault::stream_rows, 3, "a stream of 101 rows"},  // 12 + 20 + 69
      {s.msg_experts(3), 101, Fault::expert_tokens, 3, "101 tokens for expert 3"},
      {s.msg_experts(0), -2, Fault::expert_tokens, 0, "-2 tokens for expert 0"},
  };
  for (const Case& k : cases) {
    auto m = sound(s);
    m[static_cast<std::size_t>(k.field >= 0 ? k.field : s.message_ints - 1)] = k.value;
    const Fault f = check_ring_message(m.data(), s, 7);
    EXPECT_EQ(f.kind, k.kind) << k.words;
    EXPECT_EQ(f.index, k.index) << k.words;
    const std::string said = leg_message_error(unpack_leg_fault(pack_leg_fault(f)), 5);
    EXPECT_NE(said.find("rank 5"), std::string::npos) << said;
    EXPECT_NE(said.find(k.words), std::string::npos) << said;
  }
}

TEST(RingMessages, RowsSummedOverChannelsAreBounded) {
  const RingShape s = shape();
  auto m = sound(s);
  // 40 + 40 + 30 rows to this rank, each within its stream: 110 > 100.
  m[static_cast<std::size_t>(s.msg_rows(0))] = 40;
  m[static_cast<std::size_t>(s.msg_node_rows(0))] = 40;
  m[static_cast<std::size_t>(s.msg_rows(1))] = 40;
  m[static_cast<std::size_t>(s.msg_node_rows(1))] = 40;
  m[static_cast<std::size_t>(s.msg_rows(2))] = 30;
  m[static_cast<std::size_t>(s.msg_node_rows(2))] = 30;
  const Fault f = check_ring_message(m.data(), s, 7);
  EXPECT_EQ(f.kind, Fault::ring_rows);
  EXPECT_EQ(f.index, s.channels);
  EXPECT_EQ(f.value, 110);
}

}  // namespace
}  // namespace epkit::ep::kernels
