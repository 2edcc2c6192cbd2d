// The internode figures of `epkit bench ep` (ep_bench.h): DeepEP
// test_internode.py's byte counts, the bytes the engine moved, the lines that
// say which is which and the summary table.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "bench/ep_bench.h"

namespace epkit::bench {

EpNodePairs ep_node_pairs(const std::vector<int>& tokens_per_node, int my_node) {
  EpNodePairs p;
  for (std::size_t n = 0; n < tokens_per_node.size(); ++n) {
    p.all += tokens_per_node[n];
    if (static_cast<int>(n) != my_node) p.remote += tokens_per_node[n];
  }
  return p;
}

double ep_rdma_logical_bytes(EpOp op, std::int64_t all_pairs, int hidden) {
  // test_internode.py: num_rdma_token_sent * hidden * 2, times (1 + 4/128) / 2
  // for FP8; the combine's RDMA bytes are the BF16 dispatch's.
  return static_cast<double>(all_pairs) * static_cast<double>(ep_row_bytes(op, hidden));
}

double ep_rdma_physical_bytes(std::int64_t remote_pairs, std::int64_t wire_row_bytes,
                              std::int64_t fixed_bytes) {
  return static_cast<double>(remote_pairs) * static_cast<double>(wire_row_bytes) +
         static_cast<double>(fixed_bytes);
}

std::int64_t EpWireRows::row(EpOp op, bool cached) const {
  switch (op) {
    case EpOp::dispatch_fp8:
      return cached ? dispatch_fp8 : full_fp8;
    case EpOp::dispatch_bf16:
      return cached ? dispatch_bf16 : full_bf16;
    case EpOp::combine:
      return combine;
  }
  return 0;
}

std::int64_t EpWireRows::fixed(EpOp op, bool cached) const {
  return op != EpOp::combine && !cached ? messages : 0;
}

std::vector<int> ep_tokens_per_node(const std::vector<std::uint8_t>& in_rank, int ranks,
                                    int per_node) {
  if (ranks <= 0 || per_node <= 0 || ranks % per_node != 0 ||
      in_rank.size() % static_cast<std::size_t>(ranks) != 0) {
    return {};
  }
  const int nodes = ranks / per_node;
  const std::size_t tokens = in_rank.size() / static_cast<std::size_t>(ranks);
  std::vector<int> out(static_cast<std::size_t>(nodes), 0);
  for (std::size_t t = 0; t < tokens; ++t) {
    const std::uint8_t* row = in_rank.data() + t * static_cast<std::size_t>(ranks);
    for (int n = 0; n < nodes; ++n) {
      const std::uint8_t* first = row + n * per_node;
      if (std::any_of(first, first + per_node, [](std::uint8_t v) { return v != 0; })) {
        ++out[static_cast<std::size_t>(n)];
      }
    }
  }
  return out;
}

void ep_fill_bytes(EpRow& row, const EpShape& shape, const EpRankBytes& b, const EpWireRows& wire) {
  row.logical_bytes = ep_logical_bytes(row.op, b.recv_rows, shape.hidden);
  row.physical_bytes = ep_physical_bytes(row.op, b.remote_rows, shape.hidden);
  if (shape.nodes <= 1) return;
  row.rdma_logical_bytes = ep_rdma_logical_bytes(row.op, b.pairs.all, shape.hidden);
  row.rdma_physical_bytes = ep_rdma_physical_bytes(b.pairs.remote, wire.row(row.op, row.cached),
                                                   wire.fixed(row.op, row.cached));
}

std::int64_t ep_nvl_remote_rows(const std::vector<int>& gbl_prefix, int ranks_per_node, int me) {
  if (ranks_per_node <= 0 || me < 0) return 0;
  std::int64_t rows = 0;
  int before = 0;
  for (std::size_t src = 0; src < gbl_prefix.size(); ++src) {
    const int end = gbl_prefix[src];
    if (static_cast<int>(src) % ranks_per_node != me % ranks_per_node) rows += end - before;
    before = end;
  }
  return rows;
}

std::vector<std::string> ep_internode_bytes_lines(const EpReport& rep) {
  auto first = [](const std::vector<std::int64_t>& v) { return v.empty() ? 0 : v.front(); };
  const int h = rep.shape.hidden;
  const auto bf16 = ep_row_bytes(EpOp::dispatch_bf16, h);
  const auto fp8 = ep_row_bytes(EpOp::dispatch_fp8, h);
  const auto& w = rep.wire;
  return {
      fmt::format("[bytes] rank 0 sent {} (token, node) pairs, {} to other nodes; received {} "
                  "rows, {} over NVLink",
                  first(rep.node_pairs), first(rep.remote_node_pairs), first(rep.recv_rows),
                  first(rep.remote_rows)),
      fmt::format("[bytes] logical (DeepEP's test_internode.py): (RDMA) every pair, its own node "
                  "included, at {} B (FP8 {} B); (NVL) every received row at the same",
                  bf16, fp8),
      fmt::format("[bytes] physical (what the engine moved): (RDMA) the pairs to other nodes at "
                  "the row it sends, {} B (FP8 {} B; non-cached {} B, FP8 {} B, plus {} B of "
                  "count messages), combine {} B; (NVL) the rows over NVLink at {} B (FP8 {} B)",
                  w.dispatch_bf16, w.dispatch_fp8, w.full_bf16, w.full_fp8, w.messages, w.combine,
                  bf16, fp8),
  };
}

namespace {

std::string table_row(const std::string& what, const EpRow& r) {
  return fmt::format("  {:<28}{:>4}{:>6}{:>11.2f}{:>10.2f}{:>10.2f}{:>10.2f}{:>10.2f}\n", what,
                     r.sms, r.nvl_chunk, r.rank0.median_us, r.rdma_logical_gbps(), r.logical_gbps(),
                     r.rdma_physical_gbps(), r.physical_gbps());
}

}  // namespace

std::string ep_internode_table(const EpReport& rep) {
  std::string out = fmt::format(
      "#{:>50}{:>20}{:>20}\n"
      "#{:<29}{:>4}{:>6}{:>11}{:>10}{:>10}{:>10}{:>10}\n"
      "#{:<29}{:>4}{:>6}{:>11}{:>10}{:>10}{:>10}{:>10}\n",
      "", "logical (DeepEP)", "physical (moved)", " operation", "SMs", "NVL", "time", "RDMA", "NVL",
      "RDMA", "NVL", "", "", "chunk", "(us)", "(GB/s)", "(GB/s)", "(GB/s)", "(GB/s)");
  for (EpOp op : {EpOp::dispatch_fp8, EpOp::dispatch_bf16, EpOp::combine}) {
    for (int sms : rep.sms) {
      if (const EpRow* best = ep_best(rep.rows, op, sms)) out += table_row(to_string(op), *best);
    }
    for (const auto& r : rep.non_cached) {
      if (r.op != op) continue;
      out += table_row(
          r.staged ? std::string("combine, staged") : fmt::format("non-cached {}", to_string(op)),
          r);
    }
  }
  out +=
      "# best NVL chunk per op and SM count; times are rank 0's medians\n"
      "# logical: DeepEP test_internode.py's bytes (RDMA: every (token, node) pair, own node "
      "included; NVL: every received row)\n"
      "# physical: bytes the engine moved (RDMA: its packed rows to other nodes; NVL: rows from "
      "ranks with another local index)\n";
  return out;
}

}  // namespace epkit::bench
