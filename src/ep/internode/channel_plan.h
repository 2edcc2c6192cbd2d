// The rebuilt internode dispatch's counts and offsets per channel
// (docs/ep-internode.md, "Normal mode's protocol"). A rank's tokens are cut
// into channels of consecutive tokens (chunk_begin); channel c of a rank
// sends each node one row stream (network_leg::RowStream): the tokens that
// reach any rank of that node, in token order. A receiver places a row at
// its (source rank, channel) base plus the row's place among that source's
// rows to it in that channel, so every rank receives rows in global source
// rank order, then token order: the order today's internode Buffer and the
// conformance reference use, so outputs stay bitwise comparable. Host and
// device code; CPU-tested against a brute-force order.
#pragma once

#include "ep/core/kernels.h"

namespace epkit::ep::kernels {

struct ChannelSplit {
  int tokens = 0;
  int channels = 1;
};

/// Channel c's tokens are [channel_begin(c), channel_begin(c + 1)).
EPKIT_HOST_DEVICE inline int channel_begin(const ChannelSplit& s, int c) {
  return chunk_begin(c, s.tokens, s.channels);
}
/// The channel token t (0 <= t < tokens) is in.
EPKIT_HOST_DEVICE inline int channel_of(const ChannelSplit& s, int t) {
  return chunk_of(t, s.tokens, s.channels);
}

/// One rank's sends in channel c: for each destination node m the rows of
/// its stream (tokens reaching any rank of m), and for each of m's local
/// ranks g the rows for g. `reaches(t, global_rank)` is the routing
/// (is_token_in_rank). Outputs: rows_to_node[nodes], rows_to_rank[nodes x
/// per_node].
template <class Reaches>
EPKIT_HOST_DEVICE void count_channel(const ChannelSplit& s, int c, int nodes, int per_node,
                                     Reaches reaches, int* rows_to_node, int* rows_to_rank) {
  for (int m = 0; m < nodes; ++m) {
    rows_to_node[m] = 0;
    for (int g = 0; g < per_node; ++g) rows_to_rank[m * per_node + g] = 0;
  }
  for (int t = channel_begin(s, c); t < channel_begin(s, c + 1); ++t) {
    for (int m = 0; m < nodes; ++m) {
      bool any = false;
      for (int g = 0; g < per_node; ++g) {
        if (reaches(t, m * per_node + g)) {
          ++rows_to_rank[m * per_node + g];
          any = true;
        }
      }
      if (any) ++rows_to_node[m];
    }
  }
}

/// A receiver's bases. `rows[src x channels + c]`: the rows source rank src
/// sends it in channel c (from the count messages, so hostile). base[src x
/// channels + c] gets the first output row of (src, c), in global source
/// rank order then channel order, and base[sources x channels] the total.
/// False, leaving base partly written, when a count is negative or the
/// total passes max_rows or an int.
EPKIT_HOST_DEVICE inline bool receive_bases(const int* rows, int sources, int channels,
                                            long long max_rows, int* base) {
  long long at = 0;
  for (int i = 0; i < sources * channels; ++i) {
    if (rows[i] < 0) return false;
    base[i] = static_cast<int>(at);
    at += rows[i];
    if (at > max_rows || at > 0x7fffffffLL) return false;
  }
  base[sources * channels] = static_cast<int>(at);
  return true;
}

}  // namespace epkit::ep::kernels
