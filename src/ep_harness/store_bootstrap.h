// ep::Bootstrap over epkit's rendezvous store: what `epkit test ep` and
// `epkit bench ep` hand to ep::Buffer::create.
#pragma once

#include <epkit/ep.h>

#include <string>

#include "runtime/deadline.h"
#include "runtime/store.h"

namespace epkit::harness {

class StoreBootstrap final : public ep::Bootstrap {
 public:
  /// Keys are "<prefix>/<n>/<rank>", n counting the all_gathers, so one
  /// store serves several Buffers if they are made in the same order.
  StoreBootstrap(runtime::Store& store, int rank, int world_size, std::string prefix,
                 runtime::Millis timeout);
  int rank() const override { return m_rank; }
  int world_size() const override { return m_world; }
  Result<std::vector<std::string>> all_gather(const std::string& mine) override;

 private:
  runtime::Store& m_store;
  int m_rank;
  int m_world;
  std::string m_prefix;
  runtime::Millis m_timeout;
  int m_calls = 0;
};

}  // namespace epkit::harness
