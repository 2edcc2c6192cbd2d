// The internode Buffer's argument checks (see checks.h): moved out of
// buffer.cc's init, buffer_dispatch.cc and buffer_combine.cc
// so that tests/ep/argument_checks_test.cc reaches each refusal without a GPU.
#include "ep/internode/checks.h"

#include <fmt/format.h>

#include "ep/internode/buffer.h"
#include "ep/internode/ring_memory.h"
#include "ep/intranode/checks.h"

namespace epkit::ep {

Result<void> check_internode_options(const BufferOptions& o, int ranks) {
  const int per_node = o.ranks_per_node;
  if (per_node < 1 || per_node > k::k_max_ranks || ranks % per_node != 0 ||
      ranks / per_node > k::k_max_nodes)
    return invalid(fmt::format(
        "BufferOptions.ranks_per_node = {}: {} ranks must split into 2 to {} nodes of 1 to {} "
        "ranks",
        per_node, ranks, k::k_max_nodes, k::k_max_ranks));
  if (!(o.timeout_s > 0)) return invalid("BufferOptions.timeout_s must be positive");
  if (o.network_leg == BufferOptions::NetworkLeg::emulated_nic &&
      !(o.emulated_nic_gbps > 0 && o.emulated_nic_gbps <= 1e4 && o.emulated_nic_latency_us >= 0 &&
        o.emulated_nic_latency_us <= 1e6))
    return invalid(fmt::format(
        "BufferOptions: an emulated NIC of {} GB/s and {} us latency (the cap must be in (0, "
        "10000] GB/s, the latency in [0, 1e6] us)",
        o.emulated_nic_gbps, o.emulated_nic_latency_us));
  if (o.network_leg != BufferOptions::NetworkLeg::nccl_host &&
      o.network_leg != BufferOptions::NetworkLeg::emulated_nic)
    return invalid(fmt::format("BufferOptions.network_leg = {}: not a known leg",
                               static_cast<int>(o.network_leg)));
  if (o.internode_rings) {
    if (o.network_leg == BufferOptions::NetworkLeg::nccl_host)
      return invalid(
          "BufferOptions.internode_rings needs the device-driven network leg "
          "(network_leg = emulated_nic): its kernels put and wait on the leg themselves");
    auto rings = ring_memory(o, ranks);
    if (!rings) return rings.error();
  }
  const std::size_t need = internode_bytes(o, ranks);
  if (o.num_bytes != 0 && o.num_bytes < need)
    return invalid(fmt::format(
        "the Buffer needs {} bytes per GPU for {} nodes x {} ranks x {} tokens x hidden {} "
        "(top-{}), but num_bytes allows {}",
        need, ranks / per_node, per_node, o.max_tokens, o.max_hidden, o.max_topk, o.num_bytes));
  return {};
}

Result<void> check_internode_dispatch(const DispatchArgs& a, int ranks, const BufferOptions& o) {
  const TensorView& x = a.x;
  if (x.dtype != DType::bf16 && x.dtype != DType::fp8_e4m3)
    return invalid(fmt::format("dispatch: x is {}, expected bf16 or fp8_e4m3", x.describe()));
  EPKIT_TRY(check_rows(x, "dispatch: x", x.dtype));
  if (x.rows() > o.max_tokens || x.cols() > o.max_hidden)
    return invalid(
        fmt::format("dispatch: x is {}, the Buffer was made for at most {} tokens of hidden {}",
                    x.describe(), o.max_tokens, o.max_hidden));
  if (x.dtype == DType::fp8_e4m3) {
    const TensorView& s = a.x_scales;
    if (x.cols() % k::k_scale_block != 0 || !given(s) || s.dtype != DType::fp32 || s.ndim != 2 ||
        s.rows() != x.rows() || s.cols() != x.cols() / k::k_scale_block)
      return invalid(fmt::format("dispatch: FP8 x {} needs x_scales fp32[{}, {}], got {}",
                                 x.describe(), x.rows(), x.cols() / k::k_scale_block,
                                 !given(s) ? "none" : s.describe()));
  }
  if (a.handle) {
    const auto* h = dynamic_cast<const InternodeHandle*>(a.handle.get());
    if (h == nullptr || h->num_ranks != ranks)
      return invalid("cached dispatch: the handle is not from this internode Buffer");
    if (h->num_tokens != x.rows())
      return invalid(fmt::format("cached dispatch: the handle is for {} tokens, x has {}",
                                 h->num_tokens, x.rows()));
    if (given(a.topk_idx) || given(a.topk_weights))
      return invalid(
          "cached dispatch: pass x (and x_scales) only; top-k goes with the first dispatch");
    return {};
  }
  const TensorView& itir = a.is_token_in_rank;
  if (!given(itir) || itir.dtype != DType::boolean || itir.ndim != 2 || itir.rows() != x.rows() ||
      itir.cols() != ranks || itir.strides[1] != 1)
    return invalid(
        fmt::format("dispatch: is_token_in_rank must be a row-major bool[{}, {}] (from layout())",
                    x.rows(), ranks));
  const TensorView& ntpr = a.num_tokens_per_rank;
  if (ntpr.data == nullptr || ntpr.dtype != DType::int32 || ntpr.numel() != ranks)
    return invalid(
        fmt::format("dispatch: num_tokens_per_rank must be int32[{}] (from layout())", ranks));
  const TensorView& ntpe = a.num_tokens_per_expert;
  const std::int64_t experts = ntpe.numel();
  if (ntpe.data == nullptr || ntpe.dtype != DType::int32 || experts <= 0 ||
      experts > k::k_max_experts || experts % ranks != 0)
    return invalid(fmt::format(
        "dispatch: num_tokens_per_expert must be int32[experts], experts a multiple of {} up to {}",
        ranks, k::k_max_experts));
  if (given(a.topk_idx)) {
    const TensorView& t = a.topk_idx;
    if ((t.dtype != DType::int64 && t.dtype != DType::int32) || t.ndim != 2 || t.strides[1] != 1 ||
        t.rows() != x.rows() || t.cols() < 1 || t.cols() > o.max_topk)
      return invalid(
          fmt::format("dispatch: topk_idx ({}) must be a row-major int64/int32 [{}, 1..{}]",
                      t.describe(), x.rows(), o.max_topk));
  }
  if (given(a.topk_weights)) {
    const TensorView& w = a.topk_weights;
    if (!given(a.topk_idx)) return invalid("dispatch: topk_weights given without topk_idx");
    if (w.dtype != DType::fp32 || w.ndim != 2 || w.strides[1] != 1 || w.rows() != x.rows() ||
        w.cols() != a.topk_idx.cols())
      return invalid(fmt::format("dispatch: topk_weights ({}) must be row-major fp32 [{}, {}]",
                                 w.describe(), x.rows(), a.topk_idx.cols()));
  }
  const int per_node = o.ranks_per_node;
  const int experts_per_node = static_cast<int>(experts) / (ranks / per_node);
  const k::MessageFormat mf{per_node, experts_per_node, ranks / per_node};
  if (mf.min_ints() > internode_layout(o, ranks).message_ints)
    return invalid(fmt::format("dispatch: {} experts per node do not fit the count message",
                               experts_per_node));
  return {};
}

Result<void> check_internode_combine(const CombineArgs& a, int ranks) {
  const auto* h = dynamic_cast<const InternodeHandle*>(a.handle.get());
  if (h == nullptr || h->num_ranks != ranks)
    return invalid("combine: the handle is not from this internode Buffer's dispatch");
  EPKIT_TRY(check_rows(a.x, "combine: x", DType::bf16));
  // Biases and caller-owned outputs: checked as on one node.
  return check_combine_extras(a, h->num_tokens, a.x.cols(),
                              given(a.topk_weights) ? a.topk_weights.cols() : 0);
}

std::string leg_message_error(const k::LegMessageFault& f, long long sender) {
  using Fault = k::LegMessageFault;
  std::string what;
  switch (f.kind) {
    case Fault::sequence:
      what = fmt::format("rank {}'s count message belongs to another call (sequence {})", sender,
                         f.value);
      break;
    case Fault::rows:
      what = fmt::format("rank {} announced {} rows for node {}, outside 0..max_tokens", sender,
                         f.value, f.index);
      break;
    case Fault::rows_disagree:
      what = fmt::format(
          "rank {}'s count message says {} rows for node {}, not what its rows vector says", sender,
          f.value, f.index);
      break;
    case Fault::rank_tokens:
      what = fmt::format("rank {} announced {} tokens for local rank {}, outside 0..its rows",
                         sender, f.value, f.index);
      break;
    case Fault::expert_tokens:
      what = fmt::format("rank {} announced {} tokens for expert {}, outside 0..its rows x top-k",
                         sender, f.value, f.index);
      break;
    case Fault::total_rows:
      what = fmt::format(
          "rank {}'s rows bring this rank's total to {}, more than its outputs hold (channel {})",
          sender, f.value, f.index);
      break;
    case Fault::stream_rows:
      what = fmt::format(
          "rank {} announced a stream of {} rows to this node in channel {} (an index equal to the "
          "channel count: all channels), not between its rows to this rank and max_tokens",
          sender, f.value, f.index);
      break;
    case Fault::ring_rows:
      what = fmt::format(
          "rank {} announced {} rows to this rank in channel {} (an index equal to the channel "
          "count: all channels), outside 0..max_tokens",
          sender, f.value, f.index);
      break;
    default:
      what = fmt::format("rank {} sent a count message that failed an unknown check ({})", sender,
                         f.kind);
  }
  return fmt::format("{} (a corrupt or foreign count message on the network leg)", what);
}

}  // namespace epkit::ep
