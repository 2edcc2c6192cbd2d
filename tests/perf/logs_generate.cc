// Writes a synthetic 64-rank NCCL log to stdout: epkit_logs_generate SIZE_MB [RANKS]
// (the input of the documented 1 GB throughput run, docs/performance.md).
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "log_generator.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: epkit_logs_generate SIZE_MB [RANKS] > file.log\n");
    return 64;
  }
  std::uint64_t mb = std::strtoull(argv[1], nullptr, 10);
  int ranks = argc > 2 ? std::atoi(argv[2]) : 64;
  if (mb == 0 || ranks <= 0) {
    std::fprintf(stderr, "epkit_logs_generate: SIZE_MB and RANKS must be positive\n");
    return 64;
  }
  epkit::perf::generate_log(mb << 20, ranks, [](std::string_view chunk) {
    std::fwrite(chunk.data(), 1, chunk.size(), stdout);
  });
  return 0;
}
