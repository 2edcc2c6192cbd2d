// The CPU half of `epkit bench ep`: byte accounting, statistics, DeepEP's
// lines and the JSON (ep_bench.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "bench/ep_bench.h"

namespace epkit::bench {

const char* to_string(EpOp op) {
  switch (op) {
    case EpOp::dispatch_fp8:
      return "dispatch (FP8)";
    case EpOp::dispatch_bf16:
      return "dispatch (BF16)";
    case EpOp::combine:
      return "combine";
  }
  return "?";
}

const char* json_name(EpOp op) {
  switch (op) {
    case EpOp::dispatch_fp8:
      return "dispatch_fp8";
    case EpOp::dispatch_bf16:
      return "dispatch_bf16";
    case EpOp::combine:
      return "combine";
  }
  return "?";
}

std::int64_t ep_row_bytes(EpOp op, int hidden) {
  if (op == EpOp::dispatch_fp8) return hidden + static_cast<std::int64_t>(hidden / 128) * 4;
  return static_cast<std::int64_t>(hidden) * 2;
}

double ep_logical_bytes(EpOp op, std::int64_t recv_rows, int hidden) {
  // DeepEP: recv_x.numel() * 2 * (1 + 4 / 128) / 2 for FP8, which is the
  // FP8 row plus its scales whenever hidden is a multiple of 128.
  return static_cast<double>(recv_rows) * static_cast<double>(ep_row_bytes(op, hidden));
}

double ep_physical_bytes(EpOp op, std::int64_t remote_rows, int hidden) {
  return static_cast<double>(remote_rows) * static_cast<double>(ep_row_bytes(op, hidden));
}

double ep_gbps(double bytes, double time_us) {
  return time_us > 0 ? bytes / (time_us * 1e3) : 0.0;
}

std::int64_t ep_remote_rows(const std::vector<int>& m, int ranks, int me) {
  if (ranks <= 0 || me < 0 || me >= ranks || m.size() < static_cast<std::size_t>(ranks * ranks)) {
    return 0;
  }
  auto at = [&](int i, int j) { return static_cast<std::int64_t>(m[i * ranks + j]); };
  std::int64_t total = at(ranks - 1, me);
  std::int64_t local = at(me, me) - (me > 0 ? at(me - 1, me) : 0);
  return total - local;
}

EpTiming ep_summarize(std::vector<double> s) {
  EpTiming t;
  if (s.empty()) return t;
  std::sort(s.begin(), s.end());
  const std::size_t n = s.size();
  t.median_us = n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2.0;
  t.min_us = s.front();
  t.avg_us = std::accumulate(s.begin(), s.end(), 0.0) / static_cast<double>(n);
  return t;
}

bool ep_checks_passed(const std::vector<EpCheck>& checks) {
  return std::all_of(checks.begin(), checks.end(), [](const EpCheck& c) { return c.passed(); });
}

nlohmann::json ep_checks_json(const std::vector<EpCheck>& checks) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : checks) {
    out.push_back({{"name", c.name},
                   {"what", c.what},
                   {"passed", c.passed()},
                   {"failed_ranks", c.failed_ranks},
                   {"first_failure", c.first_failure}});
  }
  return out;
}

bool EpReport::checks_passed() const {
  return ep_checks_passed(checks);
}

const EpRow* ep_best(const std::vector<EpRow>& rows, EpOp op, int sms) {
  const EpRow* best = nullptr;
  for (const auto& r : rows) {
    if (r.op != op || r.sms != sms) continue;
    if (best == nullptr || r.rank0.median_us < best->rank0.median_us) best = &r;
  }
  return best;
}

std::string ep_config_line(const EpShape& s) {
  std::string nodes =
      s.nodes > 1 ? fmt::format(" ({} nodes x {})", s.nodes, s.ranks / s.nodes) : std::string();
  return fmt::format("[config] num_tokens={}, hidden={}, num_topk={}, num_experts={}, ranks={}{}",
                     s.tokens, s.hidden, s.topk, s.experts, s.ranks, nodes);
}

std::string ep_check_line(const EpCheck& c, int ranks) {
  std::string head = fmt::format("[check] {} vs reference ({}): ", c.name, c.what);
  if (c.passed()) return head + fmt::format("passed on {} rank{}", ranks, ranks == 1 ? "" : "s");
  return head + fmt::format("FAILED on rank{} {}: {}", c.failed_ranks.size() == 1 ? "" : "s",
                            fmt::join(c.failed_ranks, ", "), c.first_failure);
}

namespace {

// test_internode.py's figures after the time: "T us, R GB/s (RDMA), N GB/s
// (NVL)", then the physical pair.
std::string internode_figures(const EpRow& r) {
  return fmt::format(
      "{:.2f} us, {:.2f} GB/s (RDMA), {:.2f} GB/s (NVL), physical {:.2f} GB/s (RDMA), {:.2f} GB/s "
      "(NVL)",
      r.rank0.median_us, r.rdma_logical_gbps(), r.logical_gbps(), r.rdma_physical_gbps(),
      r.physical_gbps());
}

}  // namespace

std::string ep_tuning_line(const EpRow& r, bool internode) {
  if (internode) {
    return fmt::format("[tuning] SMs {}, NVL chunk {}: {}", r.sms, r.nvl_chunk,
                       internode_figures(r));
  }
  return fmt::format(
      "[tuning] SMs {}, NVL chunk {}: {:.2f} GB/s (NVL), {:.2f} us, physical {:.2f} GB/s", r.sms,
      r.nvl_chunk, r.logical_gbps(), r.rank0.median_us, r.physical_gbps());
}

std::string ep_best_line(const EpRow& r, bool internode) {
  if (internode) {
    // test_internode.py: "RDMA chunk 16: T us" for dispatch, "RDMA chunk
    // 12, T us" for combine; there is no RDMA chunk here, the mark follows
    // the NVL chunk.
    return fmt::format("[tuning] Best {}: SMs {}, NVL chunk {}{} {}", to_string(r.op), r.sms,
                       r.nvl_chunk, r.op == EpOp::combine ? ',' : ':', internode_figures(r));
  }
  // DeepEP's own punctuation: "NVL chunk 20, X GB/s" for dispatch but
  // "NVL chunk 7: X GB/s" for combine; scripts that parse its output rely on it.
  const char sep = r.op == EpOp::combine ? ':' : ',';
  return fmt::format(
      "[tuning] Best {}: SMs {}, NVL chunk {}{} {:.2f} GB/s (NVL), t: {:.2f} us, physical {:.2f} "
      "GB/s",
      to_string(r.op), r.sms, r.nvl_chunk, sep, r.logical_gbps(), r.rank0.median_us,
      r.physical_gbps());
}

std::string ep_non_cached_line(const EpRow& r, bool internode) {
  const std::string what = r.staged ? std::string("Combine of rows outside the Buffer (staged)")
                                    : fmt::format("Non-cached {}", to_string(r.op));
  if (internode) {
    return fmt::format("[tuning] {}: SMs {}, NVL chunk {}: {}", what, r.sms, r.nvl_chunk,
                       internode_figures(r));
  }
  return fmt::format(
      "[tuning] {}: SMs {}, NVL chunk {}, {:.2f} GB/s (NVL), t: {:.2f} us, physical {:.2f} GB/s",
      what, r.sms, r.nvl_chunk, r.logical_gbps(), r.rank0.median_us, r.physical_gbps());
}

std::string render_ep_report(const EpReport& rep) {
  std::string out = ep_config_line(rep.shape) + "\n";
  if (rep.internode() && !rep.network.empty()) out += "[network] " + rep.network + "\n";
  for (const auto& c : rep.checks) out += ep_check_line(c, rep.shape.ranks) + "\n";
  if (!rep.checks_passed()) return out;
  const bool internode = rep.internode();
  if (internode) {
    for (const auto& l : ep_internode_bytes_lines(rep)) out += l + "\n";
  } else if (!rep.recv_rows.empty() && !rep.remote_rows.empty()) {
    out += fmt::format(
        "[bytes] rank 0 received {} rows, {} from other ranks: (NVL) counts every row at "
        "{} B (FP8 {} B), physical only the other ranks' rows\n",
        rep.recv_rows[0], rep.remote_rows[0], ep_row_bytes(EpOp::dispatch_bf16, rep.shape.hidden),
        ep_row_bytes(EpOp::dispatch_fp8, rep.shape.hidden));
  }
  out += "\n";
  for (EpOp op : {EpOp::dispatch_fp8, EpOp::dispatch_bf16, EpOp::combine}) {
    bool any = false;
    for (int sms : rep.sms) {
      for (const auto& r : rep.rows) {
        if (r.op == op && r.sms == sms) out += ep_tuning_line(r, internode) + "\n";
      }
      if (const EpRow* best = ep_best(rep.rows, op, sms)) {
        out += ep_best_line(*best, internode) + "\n";
        any = true;
      }
    }
    for (const auto& r : rep.non_cached) {
      if (r.op == op) {
        out += ep_non_cached_line(r, internode) + "\n";
        any = true;
      }
    }
    if (any) out += "\n";
  }
  if (internode) out += ep_internode_table(rep);
  return out;
}

namespace {

nlohmann::json row_json(const EpRow& r, bool internode) {
  nlohmann::json j = {{"op", json_name(r.op)},
                      {"sms", r.sms},
                      {"nvl_chunk", r.nvl_chunk},
                      {"cached", r.cached},
                      {"staged", r.staged},
                      {"median_us", r.rank0.median_us},
                      {"min_us", r.rank0.min_us},
                      {"avg_us", r.rank0.avg_us},
                      {"max_rank_median_us", r.max_median_us},
                      {"logical_bytes", r.logical_bytes},
                      {"physical_bytes", r.physical_bytes},
                      {"logical_gbps", r.logical_gbps()},
                      {"physical_gbps", r.physical_gbps()}};
  if (internode) {
    j["rdma_logical_bytes"] = r.rdma_logical_bytes;
    j["rdma_physical_bytes"] = r.rdma_physical_bytes;
    j["rdma_logical_gbps"] = r.rdma_logical_gbps();
    j["rdma_physical_gbps"] = r.rdma_physical_gbps();
  }
  return j;
}

// What each byte figure of a row counts, so that a reader of the JSON alone
// knows which is DeepEP's.
nlohmann::json accounting_json(bool internode) {
  nlohmann::json a = {
      {"logical",
       "logical_bytes (NVL): DeepEP's, every row rank 0 received, its own included, at hidden x "
       "2 (FP8 x (1 + 4/128) / 2); combine as a BF16 dispatch"},
      {"physical",
       internode ? "physical_bytes (NVL): the received rows that crossed NVLink (from sources "
                   "with another local index), at the same row bytes"
                 : "physical_bytes (NVL): the rows received from (combine: sent to) other "
                   "ranks, at the same row bytes"}};
  if (internode) {
    a["rdma_logical"] =
        "rdma_logical_bytes: DeepEP's (RDMA), every (token, destination node) pair of rank 0, "
        "its own node included, at hidden x 2 (FP8 x (1 + 4/128) / 2); combine as a BF16 "
        "dispatch";
    a["rdma_physical"] =
        "rdma_physical_bytes: what rank 0's network leg sent (dispatch) or received (combine): "
        "the pairs to other nodes at wire_row_bytes, plus a non-cached dispatch's "
        "count_message_bytes";
  }
  return a;
}

}  // namespace

nlohmann::json ep_report_json(const EpReport& rep, int exit_code) {
  nlohmann::json j;
  j["config"] = {{"num_tokens", rep.shape.tokens},
                 {"hidden", rep.shape.hidden},
                 {"num_topk", rep.shape.topk},
                 {"num_experts", rep.shape.experts},
                 {"ranks", rep.shape.ranks},
                 {"nodes", rep.shape.nodes},
                 {"ranks_per_node", rep.shape.ranks / std::max(rep.shape.nodes, 1)},
                 {"seed", rep.seed},
                 {"warmup", rep.warmup},
                 {"iters", rep.iters},
                 {"sms", rep.sms},
                 {"nvl_chunks", rep.chunks},
                 {"check_sms", rep.check_sms},
                 {"check_nvl_chunk", rep.check_chunk},
                 {"gpu", rep.gpu}};
  j["checks"] = ep_checks_json(rep.checks);
  j["checks_passed"] = rep.checks_passed();
  const bool internode = rep.internode();
  j["accounting"] = accounting_json(internode);
  j["recv_rows"] = rep.recv_rows;
  j["remote_rows"] = rep.remote_rows;
  if (internode) {
    j["config"]["network"] = rep.network;
    j["node_pairs"] = rep.node_pairs;
    j["remote_node_pairs"] = rep.remote_node_pairs;
    j["wire_row_bytes"] = {{"dispatch_fp8", rep.wire.dispatch_fp8},
                           {"dispatch_bf16", rep.wire.dispatch_bf16},
                           {"non_cached_dispatch_fp8", rep.wire.full_fp8},
                           {"non_cached_dispatch_bf16", rep.wire.full_bf16},
                           {"combine", rep.wire.combine}};
    j["count_message_bytes"] = rep.wire.messages;
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : rep.rows) rows.push_back(row_json(r, internode));
  j["rows"] = rows;
  nlohmann::json non_cached = nlohmann::json::array();
  for (const auto& r : rep.non_cached) non_cached.push_back(row_json(r, internode));
  j["non_cached"] = non_cached;
  // The fastest configuration per op at each SM count, and over all of them.
  nlohmann::json best = nlohmann::json::object();
  for (EpOp op : {EpOp::dispatch_fp8, EpOp::dispatch_bf16, EpOp::combine}) {
    nlohmann::json per_sms = nlohmann::json::array();
    const EpRow* overall = nullptr;
    for (int sms : rep.sms) {
      const EpRow* b = ep_best(rep.rows, op, sms);
      if (b == nullptr) continue;
      per_sms.push_back(row_json(*b, internode));
      if (overall == nullptr || b->rank0.median_us < overall->rank0.median_us) overall = b;
    }
    if (overall == nullptr) continue;
    best[json_name(op)] = {{"overall", row_json(*overall, internode)}, {"per_sms", per_sms}};
  }
  j["best"] = best;
  j["exit_code"] = exit_code;
  return j;
}

}  // namespace epkit::bench
