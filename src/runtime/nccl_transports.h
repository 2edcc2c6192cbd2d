// The transport NCCL chose between two ranks, learned from its INFO log
// ("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"). NCCL has no API that
// says it, so `epkit test` points NCCL_DEBUG_FILE at a file and reads it.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace epkit::runtime {

/// (from rank, to rank) -> transports seen, "P2P/CUMEM/read" or
/// "NET/IB/0/GDRDMA"; several distinct ones are joined with ", ".
using PeerTransports = std::map<std::pair<int, int>, std::string>;

/// Adds what one log line says; lines that are not channel connections are
/// ignored. Returns whether the line was one.
bool parse_transport_line(std::string_view line, PeerTransports& out);

/// Every line of a log text.
PeerTransports parse_transports(std::string_view text);

}  // namespace epkit::runtime
