// The output arena's segment allocator (python/epkit/csrc/arena.h): what
// PyTorch's caching allocator gets for the MemPool over a Buffer's arena.
// Header-only and free of PyTorch, so it is tested here on the CPU.
#include "arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace {

using epkit_ext::OutputArena;
constexpr std::size_t k_mib = std::size_t{1} << 20;

std::uint8_t* base() {
  // Never dereferenced: the allocator only does address arithmetic.
  return reinterpret_cast<std::uint8_t*>(std::uintptr_t{1} << 40);
}

TEST(OutputArena, RoundsToTheGranuleAndRefusesWhatDoesNotFit) {
  OutputArena arena(base(), 9 * k_mib);  // 8 MiB usable: four 2 MiB granules
  EXPECT_EQ(arena.bytes(), 8 * k_mib);
  void* a = arena.allocate(1);
  EXPECT_EQ(a, base());
  EXPECT_EQ(arena.in_use(), 2 * k_mib);
  void* b = arena.allocate(5 * k_mib);  // 6 MiB
  EXPECT_EQ(b, base() + 2 * k_mib);
  EXPECT_EQ(arena.allocate(1), nullptr);  // full: the caller goes elsewhere
  EXPECT_EQ(arena.allocate(0), nullptr);
  EXPECT_TRUE(arena.release(a));
  EXPECT_EQ(arena.allocate(2 * k_mib), base());
}

TEST(OutputArena, FreedNeighboursMergeSoALargeSegmentFitsAgain) {
  OutputArena arena(base(), 8 * k_mib);
  std::vector<void*> s;
  for (int i = 0; i < 4; ++i) s.push_back(arena.allocate(2 * k_mib));
  EXPECT_TRUE(arena.release(s[1]));
  EXPECT_TRUE(arena.release(s[3]));
  EXPECT_EQ(arena.allocate(4 * k_mib), nullptr);  // two holes of 2 MiB, not adjacent
  EXPECT_TRUE(arena.release(s[2]));               // now 1..3 is one hole
  EXPECT_EQ(arena.allocate(6 * k_mib), base() + 2 * k_mib);
  EXPECT_EQ(arena.in_use(), 8 * k_mib);
}

TEST(OutputArena, BestFitKeepsTheLargeHole) {
  OutputArena arena(base(), 10 * k_mib);
  void* a = arena.allocate(2 * k_mib);
  void* b = arena.allocate(2 * k_mib);
  (void)arena.allocate(2 * k_mib);
  EXPECT_TRUE(arena.release(b));  // a 2 MiB hole at 2 MiB; 4 MiB free at the end
  EXPECT_EQ(arena.allocate(2 * k_mib), b);
  EXPECT_NE(a, nullptr);
}

TEST(OutputArena, ForeignAndDoubleFreesAreRefused) {
  OutputArena arena(base(), 4 * k_mib);
  void* a = arena.allocate(k_mib);
  int outside = 0;
  EXPECT_FALSE(arena.release(&outside));
  EXPECT_FALSE(arena.release(base() + k_mib));  // inside, but not a segment's start
  EXPECT_TRUE(arena.release(a));
  EXPECT_FALSE(arena.release(a));
  EXPECT_EQ(arena.in_use(), 0u);
  EXPECT_TRUE(arena.contains(base()));
  EXPECT_FALSE(arena.contains(base() + 4 * k_mib));
}

TEST(OutputArena, SmallerThanOneGranuleHoldsNothing) {
  OutputArena arena(base(), k_mib);
  EXPECT_EQ(arena.bytes(), 0u);
  EXPECT_EQ(arena.allocate(1), nullptr);
}

}  // namespace
