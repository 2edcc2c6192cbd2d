// The CPU half of `epkit bench nccl`: flags as nccl-tests spells them, the
// size sweep, bus-bandwidth factors, the result table and its JSON. Kept
// apart from the GPU code so that all of it is tested without a GPU.
#pragma once

#include <epkit/result.h>

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace epkit::bench {

enum class Collective { all_reduce, all_gather, reduce_scatter, alltoall, sendrecv, broadcast };
const char* to_string(Collective c);
Result<Collective> parse_collective(std::string_view name);

/// nccl-tests' factor from algorithm bandwidth to bus bandwidth: what each
/// rank's link must carry for the operation, so figures compare across n.
double busbw_factor(Collective c, int nranks);
/// Whether the operation has an in-place form (send and receive buffers of
/// alltoall and sendrecv cannot overlap).
bool has_in_place(Collective c);
/// Whether the table's redop / root columns apply.
bool uses_redop(Collective c);
bool uses_root(Collective c);

/// "16M", "1G", "8K", "512", "1.5K" (binary units, like nccl-tests) -> bytes.
Result<std::size_t> parse_size(std::string_view text);

struct DataType {
  std::string name;  // "float"
  std::size_t size = 4;
};
/// float, double, int32, int64 (and nccl-tests' names: int, half is not
/// supported because the data check sums exactly only in these).
Result<DataType> parse_type(std::string_view name);

/// -b min -e max -f factor: min, min*f, ... up to max (max itself included
/// when the steps land on it). Each size is rounded down to a whole number of
/// elements for every rank (count divisible by nranks where the operation
/// splits the buffer). An error for min > max, factor < 2 (with min < max) or
/// a size below one element per rank.
Result<std::vector<std::size_t>> size_sweep(std::size_t min_bytes, std::size_t max_bytes,
                                            std::size_t factor, std::size_t elem_size,
                                            std::size_t granularity);

/// Elements per rank that a buffer of `bytes` splits into: the whole count,
/// or count / nranks for gather, scatter and alltoall.
std::size_t element_granularity(Collective c, int nranks);

struct Measure {
  double time_us = 0;
  double algbw = 0;  // GB/s (1e9 bytes)
  double busbw = 0;
  std::optional<std::uint64_t> wrong;  // absent when not checked
};

struct Row {
  std::size_t bytes = 0;
  std::size_t count = 0;
  std::string type;
  std::string redop;  // "sum" or "none"
  int root = -1;
  Measure out_of_place;
  std::optional<Measure> in_place;
};

/// algbw and busbw from size and time.
Measure make_measure(Collective c, int nranks, std::size_t bytes, double time_us);

std::string table_header();
std::string table_row(const Row& row);
/// "# Out of bounds values : 0 OK" and "# Avg bus bandwidth    : 123.45".
std::string table_footer(const std::vector<Row>& rows);
/// nccl-tests' average: over every measured busbw, in-place included.
double average_busbw(const std::vector<Row>& rows);
std::uint64_t total_wrong(const std::vector<Row>& rows);

nlohmann::json to_json(const Row& row);

}  // namespace epkit::bench
