#include "cli/commands/test/ep_reproduce.h"

#include <fmt/format.h>

namespace epkit::cli {

std::string ep_reproduce_command(const EpReproduce& r) {
  std::string out = "epkit test ep";
  if (r.mode != "normal") out += " --mode " + r.mode;
  out += fmt::format(" --seed {} --tokens {} --hidden {} --topk {} --experts {} --sms {}", r.seed,
                     r.tokens, r.hidden, r.topk, r.experts, r.sms);
  const bool nodes = r.nnodes > 1;
  if (nodes) out += fmt::format(" --nnodes {}", r.nnodes);
  if (r.network_leg != "nccl")
    out += fmt::format(" --network-leg {} --nic-gbps {} --nic-latency-us {}", r.network_leg,
                       r.nic_gbps, r.nic_latency_us);
  if (r.network_leg != "nccl" && r.leg_overlap) out += " --leg-overlap";
  if (r.network_leg != "nccl" && r.rings) out += " --rings";
  if (r.network_leg != "nccl" && r.rings && r.ring_rows > 0)
    out += fmt::format(" --ring-rows {}", r.ring_rows);
  // One node: every rank is local, so the rank count is the flag.
  out += fmt::format(" --nproc-per-node {}", nodes ? r.nproc_per_node : r.ranks);
  if (r.oversubscribe) out += " --oversubscribe";
  if (nodes) out += " (on every node, with its --node-rank and the same --master)";
  return out;
}

}  // namespace epkit::cli
