// The NCCL proxy backend's wire format (ep/network_leg/slot_framing.h) on
// the CPU: puts cut into fixed-size slots land whole with their signal after
// their last byte, and every way a peer's slot can be wrong is refused naming
// that peer, never written.
#ifdef EPKIT_WITH_CUDA
#include "ep/network_leg/slot_framing.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ep/put_request.h"

namespace epkit::ep::network_leg {
namespace {

constexpr std::uint32_t kSlot = 128;  // 64 bytes of payload a slot

SlotGeometry geometry() {
  return *SlotGeometry::make(kSlot);
}

PutRequest put(int peer, std::uint64_t bytes, std::uint64_t dst_offset, std::uint32_t signal,
               std::uint64_t add) {
  PutRequest r = testing::make_put(peer, dst_offset, 7, bytes, signal, add);
  r.channel = 3;
  r.dst_window = WindowId{1};
  return r;
}

// A slot as the wire carries it: the header, then its payload from `source`.
std::vector<std::byte> wire(const PlannedSlot& slot, const std::vector<std::uint8_t>& source) {
  std::vector<std::byte> bytes(slot.stream == SlotStream::control ? sizeof(SlotHeader) : kSlot);
  std::memcpy(bytes.data(), &slot.header, sizeof(SlotHeader));
  if (slot.header.payload > 0) {
    std::memcpy(bytes.data() + sizeof(SlotHeader), source.data() + slot.src_offset,
                slot.header.payload);
  }
  return bytes;
}

// Rank 1 receiving: window 0 of 64 bytes, window 1 of 1000; 4 signals.
SlotReceiver receiver() {
  return SlotReceiver(1, 4, geometry(), {64, 1000}, 4);
}

// Plans `request` on rank 0 and feeds its slots to `rx`, applying accepted
// copies to `window`; returns the last error or the actions.
std::vector<SlotAction> deliver(SlotReceiver& rx, SlotPlanner& planner, const PutRequest& request,
                                const std::vector<std::uint8_t>& source,
                                std::vector<std::uint8_t>& window, std::string* error = nullptr) {
  std::vector<SlotAction> actions;
  auto slots = planner.plan(request);
  EXPECT_TRUE(slots.ok()) << slots.error().message;
  for (const auto& slot : *slots) {
    auto bytes = wire(slot, source);
    auto action = rx.accept(0, slot.stream, bytes);
    if (!action.ok()) {
      if (error != nullptr) *error = action.error().message;
      return actions;
    }
    std::memcpy(window.data() + action->dst_offset, bytes.data() + sizeof(SlotHeader),
                action->payload);
    actions.push_back(*action);
  }
  return actions;
}

std::vector<std::uint8_t> pattern(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 7 + 1);
  return v;
}

TEST(SlotFraming, GeometryRefusesOddSizes) {
  EXPECT_TRUE(SlotGeometry::make(128).ok());
  EXPECT_EQ(SlotGeometry::make(16 << 10)->payload_bytes(), (16u << 10) - 64);
  for (std::uint64_t bad : {0ull, 64ull, 120ull, 130ull, (64ull << 20) + 16, 1ull << 40}) {
    auto g = SlotGeometry::make(bad);
    ASSERT_FALSE(g.ok()) << bad;
    EXPECT_NE(g.error().message.find(std::to_string(bad)), std::string::npos);
  }
}

TEST(SlotFraming, APutLandsWholeAndItsSignalRidesTheLastSlot) {
  SlotPlanner planner(0, 4, geometry());
  SlotReceiver rx = receiver();
  auto source = pattern(400);
  std::vector<std::uint8_t> window(1000, 0);
  // 150 bytes: 64 + 64 + 22.
  auto actions = deliver(rx, planner, put(1, 150, 500, 2, 150), source, window);
  ASSERT_EQ(actions.size(), 3u);
  EXPECT_FALSE(actions[0].write_signal);
  EXPECT_FALSE(actions[1].write_signal);
  ASSERT_TRUE(actions[2].write_signal);
  EXPECT_EQ(actions[2].signal.value, 2u);
  EXPECT_EQ(actions[2].signal_value, 150u);
  EXPECT_EQ(std::memcmp(window.data() + 500, source.data() + 7, 150), 0);
  EXPECT_EQ(window[499], 0);
  EXPECT_EQ(window[650], 0);
  // A second put adds to the signal: absolute values grow.
  actions = deliver(rx, planner, put(1, 10, 0, 2, 5), source, window);
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].signal_value, 155u);
  EXPECT_EQ(rx.signal_value(SignalId{2}), 155u);
}

TEST(SlotFraming, ABareSignalIsOneControlSlot) {
  SlotPlanner planner(0, 4, geometry());
  auto slots = planner.plan(put(1, 0, 0, 3, 9));
  ASSERT_TRUE(slots.ok());
  ASSERT_EQ(slots->size(), 1u);
  EXPECT_EQ((*slots)[0].stream, SlotStream::control);
  SlotReceiver rx = receiver();
  auto bytes = wire((*slots)[0], {});
  auto action = rx.accept(0, SlotStream::control, bytes);
  ASSERT_TRUE(action.ok()) << action.error().message;
  EXPECT_EQ(action->payload, 0u);
  EXPECT_EQ(action->signal_value, 9u);
  // Control and data streams are numbered apart: a data put after it starts at 0.
  auto data = planner.plan(put(1, 10, 0, 3, 1));
  EXPECT_EQ((*data)[0].header.sequence, 0u);
}

TEST(SlotFraming, ThePlannerRefusesWhatCannotBeSent) {
  SlotPlanner planner(0, 4, geometry());
  for (int peer : {-1, 0, 4}) EXPECT_FALSE(planner.plan(put(peer, 10, 0, 0, 1)).ok()) << peer;
  EXPECT_FALSE(planner.plan(put(1, 0, 0, 0, 0)).ok());
  EXPECT_FALSE(planner.plan(put(1, 10, ~0ull - 3, 0, 1)).ok());
}

// Every way one slot can be wrong: refused, naming rank 0, and nothing to write.
TEST(SlotFraming, ABadSlotIsRefusedNamingItsSender) {
  const std::vector<std::pair<std::string, std::function<void(SlotHeader&)>>> bad = {
      {"magic", [](SlotHeader& h) { h.magic = 0x12345678; }},
      {"version", [](SlotHeader& h) { h.version = 2; }},
      {"sender", [](SlotHeader& h) { h.src_rank = 2; }},
      {"sequence", [](SlotHeader& h) { h.sequence = 5; }},
      {"flags", [](SlotHeader& h) { h.flags = 0x80 | SlotHeader::k_last; }},
      {"payload", [](SlotHeader& h) { h.payload = 65; }},
      {"window", [](SlotHeader& h) { h.dst_window = 2; }},
      {"offset", [](SlotHeader& h) { h.dst_offset = 990; }},
      {"offset overflow", [](SlotHeader& h) { h.dst_offset = ~0ull - 5; }},
      {"signal index", [](SlotHeader& h) { h.signal = 4; }},
      {"empty data slot", [](SlotHeader& h) { h.payload = 0; }},
      {"early signal", [](SlotHeader& h) { h.flags = 0; }},
  };
  auto source = pattern(400);
  for (const auto& [name, spoil] : bad) {
    SlotPlanner planner(0, 4, geometry());
    SlotReceiver rx = receiver();
    auto slots = planner.plan(put(1, 40, 100, 1, 1));
    ASSERT_TRUE(slots.ok());
    PlannedSlot slot = (*slots)[0];
    spoil(slot.header);
    slot.header.check = header_check(slot.header);  // a peer that means it: the checksum is right
    auto action = rx.accept(0, SlotStream::data, wire(slot, source));
    ASSERT_FALSE(action.ok()) << name;
    EXPECT_NE(action.error().message.find("rank 0 sent rank 1"), std::string::npos)
        << action.error().message;
    EXPECT_EQ(rx.signal_value(SignalId{1}), 0u) << name;
  }
}

TEST(SlotFraming, ATornHeaderFailsItsChecksumAndPoisonsTheStream) {
  SlotPlanner planner(0, 4, geometry());
  SlotReceiver rx = receiver();
  auto source = pattern(400);
  auto slots = planner.plan(put(1, 40, 100, 1, 1));
  auto bytes = wire((*slots)[0], source);
  bytes[20] ^= std::byte{0x10};  // a byte of the sequence number, checksum unchanged
  auto action = rx.accept(0, SlotStream::data, bytes);
  ASSERT_FALSE(action.ok());
  EXPECT_NE(action.error().message.find("checksum"), std::string::npos);
  // The good slot after it is refused too: the stream's order is lost.
  auto next = rx.accept(0, SlotStream::data, wire((*slots)[0], source));
  ASSERT_FALSE(next.ok());
  EXPECT_NE(next.error().message.find("not trusted"), std::string::npos);
  // Another peer's stream is untouched.
  SlotPlanner other(2, 4, geometry());
  auto theirs = other.plan(put(1, 8, 0, 0, 1));
  auto ok = rx.accept(2, SlotStream::data, wire((*theirs)[0], source));
  EXPECT_TRUE(ok.ok()) << ok.error().message;
}

TEST(SlotFraming, APutIsNotStitchedFromTwo) {
  // Slot 0 of a three-slot put, then a slot that claims to continue it
  // somewhere else in the window.
  SlotPlanner planner(0, 4, geometry());
  SlotReceiver rx = receiver();
  auto source = pattern(400);
  auto slots = planner.plan(put(1, 150, 500, 2, 1));
  ASSERT_TRUE(rx.accept(0, SlotStream::data, wire((*slots)[0], source)).ok());
  PlannedSlot second = (*slots)[1];
  second.header.dst_offset = 0;
  second.header.check = header_check(second.header);
  auto action = rx.accept(0, SlotStream::data, wire(second, source));
  ASSERT_FALSE(action.ok());
  EXPECT_NE(action.error().message.find("does not continue"), std::string::npos);
}

TEST(SlotFraming, ASignalThatWouldWrapIsRefused) {
  SlotPlanner planner(0, 4, geometry());
  SlotReceiver rx = receiver();
  auto first = planner.plan(put(1, 0, 0, 0, ~0ull - 1));
  ASSERT_TRUE(rx.accept(0, SlotStream::control, wire((*first)[0], {})).ok());
  auto second = planner.plan(put(1, 0, 0, 0, 2));
  auto action = rx.accept(0, SlotStream::control, wire((*second)[0], {}));
  ASSERT_FALSE(action.ok());
  EXPECT_NE(action.error().message.find("wrap"), std::string::npos);
  EXPECT_EQ(rx.signal_value(SignalId{0}), ~0ull - 1);
}

TEST(SlotFraming, ShortOrStrangeBuffersAreRefused) {
  SlotReceiver rx = receiver();
  std::vector<std::byte> tiny(10);
  EXPECT_FALSE(rx.accept(0, SlotStream::data, tiny).ok());
  EXPECT_FALSE(rx.accept(1, SlotStream::data, tiny).ok());  // itself
  EXPECT_FALSE(rx.accept(9, SlotStream::data, tiny).ok());  // outside the world
  // A control slot with bytes.
  SlotPlanner planner(0, 4, geometry());
  auto slots = planner.plan(put(1, 8, 0, 0, 1));
  auto action = rx.accept(0, SlotStream::control, wire((*slots)[0], pattern(64)));
  ASSERT_FALSE(action.ok());
  EXPECT_NE(action.error().message.find("control"), std::string::npos);
}

}  // namespace
}  // namespace epkit::ep::network_leg
#endif  // EPKIT_WITH_CUDA
