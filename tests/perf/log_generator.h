// A synthetic NCCL_DEBUG=INFO (+ COLL) log of a multi-node job, interleaved
// as one launcher would write it: per-rank init lines, then collectives
// from all ranks round-robin, with an "iteration: N" marker now and then.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace epkit::perf {

/// Calls sink(std::string_view chunk) until about `bytes` were produced.
template <typename Sink>
void generate_log(std::uint64_t bytes, int ranks, Sink&& sink) {
  static const char* k_colls[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast"};
  std::string buf;
  std::uint64_t produced = 0;
  auto flush = [&] {
    produced += buf.size();
    sink(std::string_view(buf));
    buf.clear();
  };
  for (int r = 0; r < ranks; ++r) {
    int node = r / 8, dev = r % 8, pid = 40000 + r;
    std::string p = fmt::format("gpu-node-{:03d}:{}:{} [{}] NCCL INFO ", node, pid, pid + 64, dev);
    buf += fmt::format("{}Bootstrap: Using eth0:10.0.{}.{}<0>\n", p, node, dev + 1);
    buf += fmt::format("{}NCCL version 2.28.9+cuda13.0\n", p);
    buf += fmt::format(
        "{}NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [2]mlx5_2:1/RoCE [3]mlx5_3:1/RoCE "
        "[RO]; OOB eth0:10.0.{}.1<0>\n",
        p, node);
    buf += fmt::format("{}Using network IB\n", p);
    buf += fmt::format("{}NET/IB : GPU Direct RDMA Enabled for HCA {} 'mlx5_{}'\n", p, dev % 4,
                       dev % 4);
    buf += fmt::format("{}Channel 00/0 : {}[{}] -> {}[{}] via P2P/CUMEM\n", p, r, dev,
                       (r + 1) % ranks, (dev + 1) % 8);
    buf += fmt::format("{}Channel 01/0 : {}[{}] -> {}[{}] [send] via NET/IB/{}/GDRDMA\n", p, r, dev,
                       (r + 8) % ranks, dev, dev % 4);
    buf += fmt::format(
        "{}ncclCommInitRankConfig comm 0x55d0c8{:04x} rank {} nranks {} cudaDev {} nvmlDev {} "
        "busId {}8000 commId 0x8e7a3b5c1f2d4e6a - Init COMPLETE\n",
        p, r, r, ranks, dev, dev, dev + 1);
  }
  flush();
  // flush() advances `produced`; the loop states it as a while so clang's
  // -Wfor-loop-analysis does not read the condition as never changing.
  std::uint64_t op = 0;
  while (produced < bytes) {
    if (op % 64 == 0) buf += fmt::format("iteration: {} loss 2.{:04d}\n", op / 64, op % 9973);
    const char* coll = k_colls[op % 4];
    for (int r = 0; r < ranks; ++r) {
      int node = r / 8, dev = r % 8, pid = 40000 + r;
      buf += fmt::format(
          "gpu-node-{:03d}:{}:{} [{}] NCCL INFO {}: opCount {:x} sendbuff 0x7f3a4c{:06x} recvbuff "
          "0x7f3a4e{:06x} "
          "count 4194304 datatype 7 op 0 root 0 comm 0x55d0c8{:04x} [nranks={}] stream "
          "0x55d0d1{:04x}\n",
          node, pid, pid, dev, coll, op, op % 4096, op % 4096, r, ranks, r);
    }
    if (buf.size() >= (1u << 20)) flush();
    ++op;
  }
  flush();
}

}  // namespace epkit::perf
