#include "ep_harness/store_bootstrap.h"

#include <fmt/format.h>

namespace epkit::harness {

StoreBootstrap::StoreBootstrap(runtime::Store& store, int rank, int world_size, std::string prefix,
                               runtime::Millis timeout)
    : m_store(store),
      m_rank(rank),
      m_world(world_size),
      m_prefix(std::move(prefix)),
      m_timeout(timeout) {}

Result<std::vector<std::string>> StoreBootstrap::all_gather(const std::string& mine) {
  auto deadline = runtime::Deadline::after(m_timeout);
  std::string base = fmt::format("{}/{}/", m_prefix, m_calls++);
  EPKIT_TRY(m_store.set(base + std::to_string(m_rank), mine, deadline));
  std::vector<std::string> all;
  all.reserve(static_cast<std::size_t>(m_world));
  for (int r = 0; r < m_world; ++r) {
    auto value = m_store.get(base + std::to_string(r), deadline);
    if (!value) return value.error();
    all.push_back(std::move(*value));
  }
  return all;
}

}  // namespace epkit::harness
