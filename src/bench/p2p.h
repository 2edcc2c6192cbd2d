// `epkit bench p2p`: a GPU x GPU copy bandwidth matrix in one process over
// every visible GPU, with the copy engines (cudaMemcpyPeerAsync) and with an
// SM copy kernel, one direction at a time and both at once.
#pragma once

#include <epkit/result.h>

#include <string>
#include <vector>

namespace epkit::bench {

enum class CopyMode { ce_unidir, ce_bidir, sm_unidir, sm_bidir };
const char* to_string(CopyMode mode);

struct P2pOptions {
  std::size_t bytes = 256u << 20;
  int iters = 10;
  int warmup = 2;
};

/// GB/s by [src][dst]; the diagonal is a device-local copy. Bidirectional
/// figures are the sum of both directions.
struct P2pMatrix {
  CopyMode mode;
  std::vector<std::vector<double>> gbps;
};

#ifdef EPKIT_WITH_CUDA
Result<std::vector<P2pMatrix>> run_p2p(const P2pOptions& options);
#endif

std::string render_p2p(const P2pMatrix& matrix);

}  // namespace epkit::bench
