#include "ep_harness/bench/dump.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <utility>

#include "util/npy.h"

namespace epkit::harness::detail {
namespace {

const char* npy_descr(DType t) {
  // BF16 and FP8 have no numpy dtype: their raw bits go out as unsigned
  // integers of the same width (README.txt says so).
  switch (t) {
    case DType::bf16:
      return "<u2";
    case DType::fp8_e4m3:
      return "|u1";
    case DType::fp32:
      return "<f4";
    case DType::int32:
      return "<i4";
    case DType::int64:
      return "<i8";
    case DType::boolean:
      return "|b1";
  }
  return "|u1";
}

std::string dump_readme(const bench::EpReport& rep) {
  return fmt::format(
      R"(epkit bench ep --dump: inputs and outputs of every rank, as NumPy .npy files
(format 1.0, C order, little-endian).

Run: num_tokens={tokens}, hidden={hidden}, num_topk={topk}, num_experts={experts},
ranks={ranks}, seed={seed}; outputs from the engine at SMs {sms}, NVL chunk {chunk}.

Types without a NumPy dtype are stored as raw bits:
  BF16 -> '<u2' (view: (a.astype(np.uint32) << 16).view(np.float32))
  FP8 E4M3 -> '|u1' (raw e4m3fn bytes; sign 1, exponent 4 (bias 7), mantissa 3)

rank<r>/ holds rank r's files:
  x.npy                 BF16 [tokens, hidden]            the dispatched tokens
  x_fp8.npy             FP8  [tokens, hidden]            x cast per 128 channels
  x_scales.npy          f32  [tokens, hidden/128]        x_fp8's scales (row-major here;
                                                         the engine got them column-major)
  topk_idx.npy          i64  [tokens, topk]              experts per token, -1 = none
  topk_weights.npy      f32  [tokens, topk]
  num_tokens_per_rank.npy, num_tokens_per_expert.npy, is_token_in_rank.npy   layout()
  recv_x.npy            BF16 [received, hidden]          dispatch of x (segments by source
                                                         rank, each in token order)
  recv_topk_idx.npy     i64  [received, topk]            local expert, -1 = not this rank's
  recv_topk_weights.npy f32  [received, topk]            0 where the index is -1
  recv_src_idx.npy      i32  [received]                  token index on the source rank
  rank_prefix_matrix.npy i32 [ranks, ranks]              (i, j): rows rank j got from ranks 0..i
  num_recv_tokens_per_expert.npy i32 [local experts]
  recv_x_fp8.npy        FP8  [received, hidden]          dispatch of x_fp8
  recv_x_scales.npy     f32  [received, hidden/128]      its scales, row-major
  combined_x.npy        BF16 [tokens, hidden]            combine of recv_x (the reference's BF16
                                                         rows, equal to recv_x.npy when the
                                                         dispatch check passed) with weights
                                                         recv_topk_weights: FP32 sum in rank
                                                         order, rounded once to BF16
  combined_topk_weights.npy f32 [tokens, topk]

{internode}scripts/device/check_ep_dump.py DIR re-derives the outputs from every rank's inputs.
)",
      fmt::arg("tokens", rep.shape.tokens), fmt::arg("hidden", rep.shape.hidden),
      fmt::arg("topk", rep.shape.topk), fmt::arg("experts", rep.shape.experts),
      fmt::arg("ranks", rep.shape.ranks), fmt::arg("seed", rep.seed),
      fmt::arg("sms", rep.check_sms), fmt::arg("chunk", rep.check_chunk),
      fmt::arg("internode",
               rep.internode()
                   ? fmt::format(
                         "Across nodes ({} nodes x {}): no recv_src_idx.npy (an internode dispatch "
                         "has none, as DeepEP's)\nand recv_gbl_rank_prefix_sum.npy i32 [ranks] "
                         "(rows from rank r end at element r) instead of\n"
                         "rank_prefix_matrix.npy; combined_x sums each node's rows, rounds, then "
                         "sums the nodes.\n\n",
                         rep.shape.nodes, rep.shape.ranks / rep.shape.nodes)
                   : std::string()));
}

// int32 counts (host vectors rather than tensors); flat unless `shape` says.
Result<void> write_ints(const std::filesystem::path& base, const char* name,
                        const std::vector<int>& v, std::vector<std::int64_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<std::int64_t>(v.size())};
  return util::write_npy((base / (std::string(name) + ".npy")).string(), "<i4", shape, v.data(),
                         v.size() * sizeof(int));
}

}  // namespace

Result<void> write_dump(const std::string& dir, int rank, const bench::EpReport& rep,
                        const DumpData& d) {
  namespace fs = std::filesystem;
  fs::path base = fs::path(dir) / fmt::format("rank{}", rank);
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec) {
    return make_error(ErrorCode::permission,
                      fmt::format("--dump: cannot create {}: {}", base.string(), ec.message()));
  }
  if (rank == 0) {
    std::ofstream readme(fs::path(dir) / "README.txt");
    readme << dump_readme(rep);
    if (!readme) {
      return make_error(ErrorCode::permission,
                        fmt::format("--dump: cannot write {}/README.txt", dir));
    }
  }
  const std::pair<const char*, const HostTensor*> files[] = {
      {"x", &d.x},
      {"x_fp8", &d.x_fp8},
      {"x_scales", &d.x_scales},
      {"topk_idx", &d.topk_idx},
      {"topk_weights", &d.topk_weights},
      {"num_tokens_per_rank", &d.num_tokens_per_rank},
      {"num_tokens_per_expert", &d.num_tokens_per_expert},
      {"is_token_in_rank", &d.is_token_in_rank},
      {"recv_x", &d.bf16.recv_x},
      {"recv_topk_idx", &d.bf16.recv_topk_idx},
      {"recv_topk_weights", &d.bf16.recv_topk_weights},
      {"recv_x_fp8", &d.fp8.recv_x},
      {"recv_x_scales", &d.fp8.recv_x_scales},
      {"combined_x", &d.combined.combined_x},
      {"combined_topk_weights", &d.combined.combined_topk_weights},
  };
  auto write = [&](const std::string& name, const HostTensor& t) {
    return util::write_npy((base / (name + ".npy")).string(), npy_descr(t.dtype), t.shape,
                           t.bytes.data(), t.bytes.size());
  };
  for (const auto& [name, t] : files) EPKIT_TRY(write(name, *t));
  EPKIT_TRY(write_ints(base, "num_recv_tokens_per_expert", d.bf16.per_expert));
  if (rep.internode()) {
    return write_ints(base, "recv_gbl_rank_prefix_sum", d.bf16.recv_gbl_rank_prefix_sum);
  }
  EPKIT_TRY(write("recv_src_idx", d.bf16.recv_src_idx));
  const auto& m = d.bf16.rank_prefix_matrix;
  const auto n = static_cast<std::int64_t>(rep.shape.ranks);
  // A matrix of the wrong size (a failed check says so) is still written,
  // flat, for whoever investigates.
  return write_ints(base, "rank_prefix_matrix", m,
                    m.size() == static_cast<std::size_t>(n * n) ? std::vector<std::int64_t>{n, n}
                                                                : std::vector<std::int64_t>{});
}

}  // namespace epkit::harness::detail
