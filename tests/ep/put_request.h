// A PutRequest as the network-leg tests post them (window 0 to window 0
// unless a test sets others).
#pragma once

#include <cstdint>

#include "ep/network_leg/leg.h"

namespace epkit::ep::network_leg::testing {

inline PutRequest make_put(int peer, std::uint64_t dst_offset, std::uint64_t src_offset,
                           std::uint64_t bytes, std::uint32_t signal, std::uint64_t add) {
  PutRequest r;
  r.peer = peer;
  r.dst_offset = dst_offset;
  r.src_offset = src_offset;
  r.bytes = bytes;
  r.signal = SignalId{signal};
  r.signal_add = add;
  return r;
}

}  // namespace epkit::ep::network_leg::testing
