#include "bench/sweep.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

namespace epkit::bench {
namespace {

struct Named {
  Collective c;
  const char* name;
};
constexpr Named k_names[] = {{Collective::all_reduce, "all_reduce"},
                             {Collective::all_gather, "all_gather"},
                             {Collective::reduce_scatter, "reduce_scatter"},
                             {Collective::alltoall, "alltoall"},
                             {Collective::sendrecv, "sendrecv"},
                             {Collective::broadcast, "broadcast"}};

std::string fmt_measure(const Measure& m) {
  return fmt::format("  {:>8.2f}  {:>6.2f}  {:>6.2f}  {:>6}", m.time_us, m.algbw, m.busbw,
                     m.wrong ? std::to_string(*m.wrong) : std::string("N/A"));
}

nlohmann::json measure_json(const Measure& m) {
  nlohmann::json j = {{"time_us", m.time_us}, {"algbw_gbps", m.algbw}, {"busbw_gbps", m.busbw}};
  j["wrong"] = m.wrong ? nlohmann::json(*m.wrong) : nlohmann::json(nullptr);
  return j;
}

}  // namespace

const char* to_string(Collective c) {
  for (const auto& n : k_names) {
    if (n.c == c) return n.name;
  }
  return "?";
}

Result<Collective> parse_collective(std::string_view name) {
  std::string names;
  for (const auto& n : k_names) {
    if (name == n.name) return n.c;
    names += (names.empty() ? "" : ", ") + std::string(n.name);
  }
  return make_error(ErrorCode::invalid,
                    fmt::format("unknown collective '{}' (one of: {})", name, names));
}

double busbw_factor(Collective c, int nranks) {
  const double n = nranks;
  switch (c) {
    case Collective::all_reduce:
      return nranks > 0 ? 2.0 * (n - 1) / n : 0.0;
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::alltoall:
      return nranks > 0 ? (n - 1) / n : 0.0;
    case Collective::sendrecv:
    case Collective::broadcast:
      return 1.0;
  }
  return 1.0;
}

bool has_in_place(Collective c) {
  return c != Collective::alltoall && c != Collective::sendrecv;
}
bool uses_redop(Collective c) {
  return c == Collective::all_reduce || c == Collective::reduce_scatter;
}
bool uses_root(Collective c) { return c == Collective::broadcast; }

Result<std::size_t> parse_size(std::string_view text) {
  if (text.empty()) return make_error(ErrorCode::invalid, "empty size");
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data() || value < 0 || !std::isfinite(value)) {
    return make_error(ErrorCode::invalid, fmt::format("size '{}' is not a number", text));
  }
  std::string_view unit(end, static_cast<std::size_t>(text.data() + text.size() - end));
  double scale = 1;
  if (unit.size() > 1 && (unit.back() == 'B' || unit.back() == 'b')) unit.remove_suffix(1);
  if (unit.empty()) {
    scale = 1;
  } else if (unit == "K" || unit == "k") {
    scale = 1024.0;
  } else if (unit == "M" || unit == "m") {
    scale = 1024.0 * 1024;
  } else if (unit == "G" || unit == "g") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "T" || unit == "t") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return make_error(ErrorCode::invalid,
                      fmt::format("size '{}' has an unknown unit '{}' (K, M, G or T)", text, unit));
  }
  double bytes = value * scale;
  if (bytes > 1e15) return make_error(ErrorCode::invalid, fmt::format("size '{}' is too large", text));
  return static_cast<std::size_t>(bytes);
}

Result<DataType> parse_type(std::string_view name) {
  if (name == "float" || name == "float32") return DataType{"float", 4};
  if (name == "double" || name == "float64") return DataType{"double", 8};
  if (name == "int32" || name == "int") return DataType{"int32", 4};
  if (name == "int64") return DataType{"int64", 8};
  return make_error(ErrorCode::invalid, fmt::format("data type '{}' is not supported (float, "
                                                    "double, int32 or int64)",
                                                    name));
}

std::size_t element_granularity(Collective c, int nranks) {
  switch (c) {
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::alltoall:
      return nranks > 0 ? static_cast<std::size_t>(nranks) : 1;
    default:
      return 1;
  }
}

Result<std::vector<std::size_t>> size_sweep(std::size_t min_bytes, std::size_t max_bytes,
                                            std::size_t factor, std::size_t elem_size,
                                            std::size_t granularity) {
  if (min_bytes > max_bytes) {
    return make_error(ErrorCode::invalid, fmt::format("-b {} is larger than -e {}", min_bytes,
                                                      max_bytes));
  }
  if (min_bytes < max_bytes && factor < 2) {
    return make_error(ErrorCode::invalid, "-f must be at least 2 when -b < -e");
  }
  const std::size_t unit = elem_size * granularity;
  std::vector<std::size_t> out;
  for (std::size_t bytes = min_bytes; bytes <= max_bytes;) {
    std::size_t rounded = bytes / unit * unit;
    if (rounded == 0) {
      return make_error(ErrorCode::invalid,
                        fmt::format("size {} B is less than one {}-byte element per rank ({} B)",
                                    bytes, elem_size, unit));
    }
    if (out.empty() || out.back() != rounded) out.push_back(rounded);
    if (bytes == max_bytes || factor < 2 || bytes > max_bytes / factor) break;
    bytes *= factor;
  }
  return out;
}

Measure make_measure(Collective c, int nranks, std::size_t bytes, double time_us) {
  Measure m;
  m.time_us = time_us;
  if (time_us > 0) {
    m.algbw = static_cast<double>(bytes) / (time_us * 1e-6) / 1e9;
    m.busbw = m.algbw * busbw_factor(c, nranks);
  }
  return m;
}

std::string table_header() {
  return fmt::format(
      "#{:>58}{:>36}{:>36}\n"
      "#{:>11}  {:>12}  {:>8}  {:>6}  {:>6}  {:>8}  {:>6}  {:>6}  {:>6}  {:>8}  {:>6}  {:>6}  "
      "{:>6}\n"
      "#{:>11}  {:>12}  {:>8}  {:>6}  {:>6}  {:>8}  {:>6}  {:>6}  {:>6}  {:>8}  {:>6}  {:>6}  "
      "{:>6}\n",
      "", "out-of-place", "in-place", "size", "count", "type", "redop", "root", "time", "algbw",
      "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "(B)", "(elements)", "", "", "",
      "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

std::string table_row(const Row& row) {
  std::string out = fmt::format("{:>12}  {:>12}  {:>8}  {:>6}  {:>6}", row.bytes, row.count,
                                row.type, row.redop, row.root);
  out += fmt_measure(row.out_of_place);
  if (row.in_place) {
    out += fmt_measure(*row.in_place);
  } else {
    out += fmt::format("  {:>8}  {:>6}  {:>6}  {:>6}", "N/A", "N/A", "N/A", "N/A");
  }
  return out + "\n";
}

double average_busbw(const std::vector<Row>& rows) {
  double sum = 0;
  int n = 0;
  for (const auto& r : rows) {
    sum += r.out_of_place.busbw;
    ++n;
    if (r.in_place) {
      sum += r.in_place->busbw;
      ++n;
    }
  }
  return n > 0 ? sum / n : 0.0;
}

std::uint64_t total_wrong(const std::vector<Row>& rows) {
  std::uint64_t total = 0;
  for (const auto& r : rows) {
    total += r.out_of_place.wrong.value_or(0);
    if (r.in_place) total += r.in_place->wrong.value_or(0);
  }
  return total;
}

std::string table_footer(const std::vector<Row>& rows) {
  std::uint64_t wrong = total_wrong(rows);
  return fmt::format("# Out of bounds values : {} {}\n# Avg bus bandwidth    : {:.4f}\n", wrong,
                     wrong == 0 ? "OK" : "FAILED", average_busbw(rows));
}

nlohmann::json to_json(const Row& row) {
  nlohmann::json j = {{"size_bytes", row.bytes}, {"count", row.count}, {"type", row.type},
                      {"redop", row.redop},      {"root", row.root},
                      {"out_of_place", measure_json(row.out_of_place)}};
  j["in_place"] = row.in_place ? measure_json(*row.in_place) : nlohmann::json(nullptr);
  return j;
}

}  // namespace epkit::bench
