// The CPU half of `epkit bench ep --mode low-latency` (bench/ep_bench_low_latency.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "bench/ep_bench_low_latency.h"

namespace epkit::bench {

double ep_low_latency_dispatch_bytes_per_pair(bool fp8, int hidden) {
  const double h = hidden;
  // test_low_latency.py counts hidden + hidden / 128 * 4 + 16 for FP8; the
  // BF16 row is 2 x hidden with the same 16 bytes of source information.
  return fp8 ? h + h / 128.0 * 4.0 + 16.0 : h * 2.0 + 16.0;
}

double ep_low_latency_combine_bytes_per_pair(int hidden) {
  return static_cast<double>(hidden) * 2.0;
}

std::int64_t ep_low_latency_selections(const std::vector<std::int64_t>& topk_idx) {
  return std::count_if(topk_idx.begin(), topk_idx.end(), [](std::int64_t e) { return e != -1; });
}

EpLowLatencyTiming ep_low_latency_summarize(std::vector<double> s) {
  EpLowLatencyTiming t;
  if (s.empty()) return t;
  std::sort(s.begin(), s.end());
  const std::size_t n = s.size();
  t.median_us = n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2.0;
  t.min_us = s.front();
  t.max_us = s.back();
  t.avg_us = std::accumulate(s.begin(), s.end(), 0.0) / static_cast<double>(n);
  return t;
}

void ep_low_latency_fill_bytes(EpLowLatencyRun& run, int hidden) {
  const auto pairs = static_cast<double>(run.selections);
  run.dispatch_bytes = pairs * ep_low_latency_dispatch_bytes_per_pair(run.fp8, hidden);
  run.combine_bytes = pairs * ep_low_latency_combine_bytes_per_pair(hidden);
}

bool EpLowLatencyReport::checks_passed() const {
  return ep_checks_passed(checks);
}

std::string ep_low_latency_config_line(const EpLowLatencyReport& r) {
  return fmt::format(
      "[config] num_tokens={}, hidden={}, num_topk={}, num_experts={}, ranks={}, num_sms={}",
      r.shape.tokens, r.shape.hidden, r.shape.topk, r.shape.experts, r.shape.ranks, r.sms);
}

std::vector<std::string> ep_low_latency_deepep_lines(const EpLowLatencyRun& run, int rank) {
  const std::string p = fmt::format("[rank {}] ", rank);
  return {
      p + fmt::format(
              "Dispatch + combine bandwidth: {:.2f} GB/s, avg_t={:.2f} us, min_t={:.2f} us, "
              "max_t={:.2f} us",
              ep_gbps(run.dispatch_bytes + run.combine_bytes, run.pair.avg_us), run.pair.avg_us,
              run.pair.min_us, run.pair.max_us),
      p + fmt::format(
              "Dispatch bandwidth: {:.2f} GB/s, avg_t={:.2f} us | Combine bandwidth: {:.2f} GB/s, "
              "avg_t={:.2f} us",
              ep_gbps(run.dispatch_bytes, run.dispatch.avg_us), run.dispatch.avg_us,
              ep_gbps(run.combine_bytes, run.combine.avg_us), run.combine.avg_us),
      p + fmt::format(
              "Dispatch send/recv time: {:.2f} + {:.2f} us | Combine send/recv time: {:.2f} + "
              "{:.2f} us",
              run.dispatch_send.avg_us, run.dispatch_recv.avg_us, run.combine_send.avg_us,
              run.combine_recv.avg_us),
  };
}

namespace {

struct TableRow {
  const char* op;
  const char* hook;
  const EpLowLatencyTiming* t;
  double bytes;  // 0: no bandwidth (the halves of a hooked call)
};

std::vector<TableRow> table_rows(const EpLowLatencyRun& r) {
  return {
      {"dispatch+combine", "no", &r.pair, r.dispatch_bytes + r.combine_bytes},
      {"dispatch", "no", &r.dispatch, r.dispatch_bytes},
      {"combine", "no", &r.combine, r.combine_bytes},
      {"dispatch send", "yes", &r.dispatch_send, 0},
      {"dispatch recv", "yes", &r.dispatch_recv, 0},
      {"combine send", "yes", &r.combine_send, 0},
      {"combine recv", "yes", &r.combine_recv, 0},
  };
}

const char* dtype_name(bool fp8) {
  return fp8 ? "fp8" : "bf16";
}

}  // namespace

std::string ep_low_latency_table(const EpLowLatencyReport& rep) {
  std::string out;
  out += "#\n";
  out += fmt::format("# {:>16}  {:>6}  {:>4}  {:>10}  {:>10}  {:>10}  {:>8}\n", "op", "dtype",
                     "hook", "median", "avg", "min", "busbw");
  out += fmt::format("# {:>16}  {:>6}  {:>4}  {:>10}  {:>10}  {:>10}  {:>8}\n", "", "", "", "(us)",
                     "(us)", "(us)", "(GB/s)");
  if (rep.by_rank.empty()) return out;
  for (const auto& run : rep.by_rank.front()) {
    for (const auto& row : table_rows(run)) {
      const std::string bw =
          row.bytes > 0 ? fmt::format("{:.2f}", ep_gbps(row.bytes, row.t->median_us)) : "-";
      out += fmt::format("  {:>16}  {:>6}  {:>4}  {:>10.2f}  {:>10.2f}  {:>10.2f}  {:>8}\n", row.op,
                         dtype_name(run.fp8), row.hook, row.t->median_us, row.t->avg_us,
                         row.t->min_us, bw);
    }
  }
  out += "# GB/s: DeepEP's bytes (per selected pair: FP8 hidden + hidden/128*4 + 16, BF16\n";
  out += "# 2*hidden + 16; combine 2*hidden) over rank 0's median time.\n";
  return out;
}

std::string render_ep_low_latency_report(const EpLowLatencyReport& rep) {
  std::string out = ep_low_latency_config_line(rep) + "\n";
  for (const auto& c : rep.checks) {
    std::string head = fmt::format("[check] {} ({}): ", c.name, c.what);
    if (c.passed()) {
      out += head +
             fmt::format("passed on {} rank{}\n", rep.shape.ranks, rep.shape.ranks == 1 ? "" : "s");
    } else {
      out += head + fmt::format("FAILED on rank{} {}: {}\n", c.failed_ranks.size() == 1 ? "" : "s",
                                fmt::join(c.failed_ranks, ", "), c.first_failure);
    }
  }
  if (!rep.checks_passed()) return out;
  const std::size_t runs = rep.by_rank.empty() ? 0 : rep.by_rank.front().size();
  for (std::size_t i = 0; i < runs; ++i) {
    const bool fp8 = rep.by_rank.front()[i].fp8;
    out += fmt::format("\n[{} dispatch{}]\n", fp8 ? "FP8" : "BF16",
                       fp8 ? ", DeepEP's timing case" : ", no cast");
    for (std::size_t r = 0; r < rep.by_rank.size(); ++r) {
      if (i >= rep.by_rank[r].size()) continue;
      for (const auto& l : ep_low_latency_deepep_lines(rep.by_rank[r][i], static_cast<int>(r))) {
        out += l + "\n";
      }
    }
  }
  // Appended in two steps: `"\n" + string` trips GCC 12's -O3 -Wrestrict
  // false alarm (PR 105329).
  if (runs > 0) {
    out += '\n';
    out += ep_low_latency_table(rep);
  }
  return out;
}

namespace {

nlohmann::json timing_json(const EpLowLatencyTiming& t) {
  return {
      {"avg_us", t.avg_us}, {"min_us", t.min_us}, {"max_us", t.max_us}, {"median_us", t.median_us}};
}

bool timing_from(const nlohmann::json& j, EpLowLatencyTiming& t) {
  if (!j.is_object()) return false;
  for (auto [key, to] : {std::pair{"avg_us", &t.avg_us}, std::pair{"min_us", &t.min_us},
                         std::pair{"max_us", &t.max_us}, std::pair{"median_us", &t.median_us}}) {
    if (!j.contains(key) || !j[key].is_number()) return false;
    *to = j[key].get<double>();
  }
  return true;
}

struct Field {
  const char* key;
  EpLowLatencyTiming EpLowLatencyRun::*member;
};
constexpr Field k_fields[] = {
    {"dispatch_combine", &EpLowLatencyRun::pair},
    {"dispatch", &EpLowLatencyRun::dispatch},
    {"combine", &EpLowLatencyRun::combine},
    {"dispatch_send", &EpLowLatencyRun::dispatch_send},
    {"dispatch_recv", &EpLowLatencyRun::dispatch_recv},
    {"combine_send", &EpLowLatencyRun::combine_send},
    {"combine_recv", &EpLowLatencyRun::combine_recv},
};

}  // namespace

nlohmann::json to_json(const EpLowLatencyRun& run) {
  nlohmann::json j = {
      {"dtype", dtype_name(run.fp8)},
      {"selections", run.selections},
      {"dispatch_bytes", run.dispatch_bytes},
      {"combine_bytes", run.combine_bytes},
      {"dispatch_combine_gbps", ep_gbps(run.dispatch_bytes + run.combine_bytes, run.pair.avg_us)},
      {"dispatch_gbps", ep_gbps(run.dispatch_bytes, run.dispatch.avg_us)},
      {"combine_gbps", ep_gbps(run.combine_bytes, run.combine.avg_us)}};
  for (const auto& f : k_fields) j[f.key] = timing_json(run.*(f.member));
  return j;
}

bool from_json(const nlohmann::json& j, EpLowLatencyRun& run) {
  if (!j.is_object() || !j.contains("dtype") || !j["dtype"].is_string() ||
      !j.contains("selections") || !j["selections"].is_number_integer()) {
    return false;
  }
  const std::string dtype = j["dtype"].get<std::string>();
  if (dtype != "fp8" && dtype != "bf16") return false;
  run.fp8 = dtype == "fp8";
  run.selections = j["selections"].get<std::int64_t>();
  for (const auto& f : k_fields) {
    if (!j.contains(f.key) || !timing_from(j[f.key], run.*(f.member))) return false;
  }
  // A peer rank's JSON: value() would throw on a non-number.
  for (auto [key, to] : {std::pair{"dispatch_bytes", &run.dispatch_bytes},
                         std::pair{"combine_bytes", &run.combine_bytes}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_number()) return false;
    *to = j[key].get<double>();
  }
  return true;
}

nlohmann::json ep_low_latency_report_json(const EpLowLatencyReport& rep, int exit_code) {
  nlohmann::json j = {{"mode", "low-latency"},
                      {"num_tokens", rep.shape.tokens},
                      {"hidden", rep.shape.hidden},
                      {"num_topk", rep.shape.topk},
                      {"num_experts", rep.shape.experts},
                      {"ranks", rep.shape.ranks},
                      {"num_sms", rep.sms},
                      {"warmup", rep.warmup},
                      {"iters", rep.iters},
                      {"seed", rep.seed},
                      {"gpu", rep.gpu},
                      {"exit_code", exit_code}};
  j["checks"] = ep_checks_json(rep.checks);
  // The table's rows (rank 0), then every rank's runs.
  nlohmann::json rows = nlohmann::json::array();
  if (!rep.by_rank.empty()) {
    for (const auto& run : rep.by_rank.front()) {
      for (const auto& row : table_rows(run)) {
        rows.push_back(
            {{"op", row.op},
             {"dtype", dtype_name(run.fp8)},
             {"hook", std::string(row.hook) == "yes"},
             {"median_us", row.t->median_us},
             {"avg_us", row.t->avg_us},
             {"min_us", row.t->min_us},
             {"max_us", row.t->max_us},
             {"gbps", row.bytes > 0 ? nlohmann::json(ep_gbps(row.bytes, row.t->median_us))
                                    : nlohmann::json(nullptr)}});
      }
    }
  }
  j["rows"] = rows;
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& runs : rep.by_rank) {
    nlohmann::json rj = nlohmann::json::array();
    for (const auto& run : runs) rj.push_back(to_json(run));
    ranks.push_back(rj);
  }
  j["by_rank"] = ranks;
  return j;
}

}  // namespace epkit::bench
