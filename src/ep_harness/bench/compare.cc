#include "ep_harness/bench/compare.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

namespace epkit::harness::detail {
namespace {

std::string hex(const std::uint8_t* p, std::size_t n) {
  // Little-endian element bytes, printed most significant first.
  std::string out;
  for (std::size_t i = n; i-- > 0;) out += fmt::format("{:02x}", p[i]);
  return out;
}

}  // namespace

std::string compare(const char* name, const HostTensor& engine, const HostTensor& ref) {
  if (engine.shape != ref.shape) {
    return fmt::format("{}: engine shape [{}], reference [{}]", name, fmt::join(engine.shape, ", "),
                       fmt::join(ref.shape, ", "));
  }
  if (engine.dtype != ref.dtype) {
    return fmt::format("{}: engine {}, reference {}", name, ep::to_string(engine.dtype),
                       ep::to_string(ref.dtype));
  }
  auto [a, b] =
      std::mismatch(engine.bytes.begin(), engine.bytes.end(), ref.bytes.begin(), ref.bytes.end());
  if (a == engine.bytes.end() && b == ref.bytes.end()) return "";
  const std::size_t row = engine.row_bytes();
  const std::size_t elem = ep::dtype_size(engine.dtype);
  const std::size_t at = static_cast<std::size_t>(a - engine.bytes.begin());
  std::size_t rows_differ = 0;
  for (std::size_t off = at / row * row; off < engine.bytes.size(); off += row) {
    if (std::memcmp(engine.bytes.data() + off, ref.bytes.data() + off, row) != 0) ++rows_differ;
  }
  const std::size_t first = at / elem * elem;
  return fmt::format(
      "{} ({}): {} of {} rows differ; first at row {}, column {} (engine 0x{}, "
      "reference 0x{})",
      name, ep::to_string(engine.dtype), rows_differ, engine.bytes.size() / row, at / row,
      (at % row) / elem, hex(engine.bytes.data() + first, elem),
      hex(ref.bytes.data() + first, elem));
}

std::string compare_ints(const char* name, const std::vector<int>& engine,
                         const std::vector<int>& ref) {
  if (engine == ref) return "";
  auto [a, b] = std::mismatch(engine.begin(), engine.end(), ref.begin(), ref.end());
  std::size_t at = static_cast<std::size_t>(a - engine.begin());
  return fmt::format(
      "{}: engine has {} entries, reference {}; first difference at {} (engine "
      "{}, reference {})",
      name, engine.size(), ref.size(), at,
      a == engine.end() ? std::string("-") : std::to_string(*a),
      b == ref.end() ? std::string("-") : std::to_string(*b));
}

void note(std::string& verdict, const std::string& message) {
  if (message.empty()) return;
  if (!verdict.empty()) verdict += "; ";
  verdict += message;
}

std::string compare_dispatch(const HostDispatch& e, const HostDispatch& r, bool routing,
                             const Comparer& who) {
  std::string v;
  if (e.rows != r.rows) {
    note(v, fmt::format("received rows: engine {}, reference {}", e.rows, r.rows));
  }
  note(v, compare("recv_x", e.recv_x, r.recv_x));
  note(v, compare("recv_x_scales", e.recv_x_scales, r.recv_x_scales));
  if (routing) {
    note(v, compare("recv_topk_idx", e.recv_topk_idx, r.recv_topk_idx));
    note(v, compare("recv_topk_weights", e.recv_topk_weights, r.recv_topk_weights));
    if (!who.internode) note(v, compare("recv_src_idx", e.recv_src_idx, r.recv_src_idx));
    note(v, compare_ints("num_recv_tokens_per_expert", e.per_expert, r.per_expert));
  }
  if (!who.internode) {
    note(v, compare_ints("rank_prefix_matrix", e.rank_prefix_matrix, r.rank_prefix_matrix));
    return v;
  }
  // This rank's column of the reference's matrix: element src is the rows
  // it received from ranks 0..src, which is recv_gbl_rank_prefix_sum.
  const int n = who.ranks;
  std::vector<int> column;
  if (r.rank_prefix_matrix.size() == static_cast<std::size_t>(n * n) && who.rank >= 0 &&
      who.rank < n) {
    for (int src = 0; src < n; ++src)
      column.push_back(r.rank_prefix_matrix[static_cast<std::size_t>(src * n + who.rank)]);
  }
  note(v, compare_ints("recv_gbl_rank_prefix_sum", e.recv_gbl_rank_prefix_sum, column));
  return v;
}

std::string compare_combine(const HostCombine& e, const HostCombine& r) {
  std::string v;
  note(v, compare("combined_x", e.combined_x, r.combined_x));
  note(v, compare("combined_topk_weights", e.combined_topk_weights, r.combined_topk_weights));
  return v;
}

}  // namespace epkit::harness::detail
