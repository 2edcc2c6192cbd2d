// Ranks as threads of one test process: an in-process Bootstrap whose
// all_gather meets every rank's thread in one room, with a hook that lets a
// test tamper with what one rank sees (a hostile peer's descriptor).
#pragma once

#include <epkit/ep.h>
#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace epkit::test {

struct GatherRoom {
  explicit GatherRoom(int ranks) : world(ranks), slots(static_cast<std::size_t>(ranks)) {}
  int world;
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::string> slots;
  std::vector<std::string> result;
  int arrived = 0;
  std::uint64_t generation = 0;
  std::function<void(int viewer, std::vector<std::string>&)> tamper;
};

class ThreadBootstrap final : public ep::Bootstrap {
 public:
  ThreadBootstrap(GatherRoom& room, int rank) : m_room(&room), m_rank(rank) {}
  int rank() const override { return m_rank; }
  int world_size() const override { return m_room->world; }
  Result<std::vector<std::string>> all_gather(const std::string& mine) override {
    std::unique_lock lock(m_room->mutex);
    const auto generation = m_room->generation;
    m_room->slots[static_cast<std::size_t>(m_rank)] = mine;
    if (++m_room->arrived == m_room->world) {
      m_room->result = m_room->slots;
      m_room->arrived = 0;
      ++m_room->generation;
      m_room->cv.notify_all();
    } else if (!m_room->cv.wait_for(lock, std::chrono::seconds(10),
                                    [&] { return m_room->generation != generation; })) {
      return make_error(ErrorCode::timeout, fmt::format("rank {}: all_gather timed out", m_rank));
    }
    auto seen = m_room->result;
    if (m_room->tamper) m_room->tamper(m_rank, seen);
    return seen;
  }

 private:
  GatherRoom* m_room;
  int m_rank;
};

// A world of ranks as threads for creation and exchange; the tests then
// drive each rank's progress from wherever they like.

}  // namespace epkit::test
