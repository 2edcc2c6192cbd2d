// The network leg of an internode Buffer: byte ranges to and from the ranks
// with this rank's local index on the other nodes (its "rail"), posted on
// the Buffer's stream. One implementation today, over NCCL's host API
// (nccl_network.cc: grouped ncclSend/ncclRecv on one communicator per rail,
// so it runs on any network NCCL runs on); a device-initiated one (NCCL's
// GIN) fits the same interface later. See docs/ep-internode.md.
#pragma once

#include <cuda_runtime_api.h>
#include <epkit/ep.h>
#include <epkit/result.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>

namespace epkit::ep {

/// One side of a transfer with node `node`'s rank on this rail.
struct Transfer {
  int node = 0;
  void* data = nullptr;
  std::size_t bytes = 0;
};

class Network {
 public:
  virtual ~Network() = default;
  /// Posts every send and receive as one group on `stream` (transfers to or
  /// from this node, and empty ones, are skipped: both sides know the sizes).
  virtual Result<void> exchange(std::span<const Transfer> sends, std::span<const Transfer> receives,
                                cudaStream_t stream) = 0;
  /// A failure the transport reported on its own (a peer's connection
  /// closed, a network error); success while healthy.
  virtual Result<void> health() = 0;
  /// Ends every pending transfer (their kernels return), after which the
  /// Network cannot be used. For a rank giving up on a peer.
  virtual void abort() = 0;
  /// "NCCL 2.28.9, a communicator of 2 ranks per rail".
  virtual std::string describe() const = 0;
};

/// The NCCL implementation. Collective over every rank of `bootstrap`
/// (nodes x ranks_per_node, global rank = node * ranks_per_node + local):
/// each rail's first rank makes an ncclUniqueId that travels through the
/// bootstrap. libnccl is opened with dlopen (an already loaded one, such as
/// PyTorch's, is reused); the error names the library when it is missing.
Result<std::unique_ptr<Network>> make_nccl_network(Bootstrap& bootstrap, int ranks_per_node,
                                                   double timeout_s);

}  // namespace epkit::ep
