// The NIC check of a run: did each GPU's network traffic go through the NIC
// the topology model chose for it? Pure: the plan (topo::assign_nics' choices
// for the GPUs the run used) and two counter readings in, findings out, so it
// is tested without hardware. The findings reuse the doctor's Outcome
// (status, summary, evidence, expected, fix) under ids of their own:
//
//   nic.single-nic        WARN     one NIC carried most of the bytes while the plan
//                                  spreads the GPUs over several (the single-NIC fault)
//   nic.unused            WARN     a planned NIC moved (almost) nothing while others moved data
//   nic.off-plan          WARN     the planned NICs moved little while other NICs moved a lot
//   nic.counters-unknown  UNKNOWN  no readable counter for a planned NIC: not checked
//   nic.little-traffic    SKIP     the run moved too little to judge
//   nic.no-plan           SKIP     no NIC was planned for these GPUs
//
// docs/topology.md ("The post-run NIC check") has the rules and thresholds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checks/check.h"
#include "topo/model.h"
#include "topo/nic_counters.h"

namespace epkit::checks {

struct NicTrafficLimits {
  /// A run is judged when the planned NICs moved at least this many bytes
  /// each on average (tx + rx): below it, background traffic could decide.
  std::uint64_t min_bytes_per_nic = 32ull << 20;
  /// nic.single-nic: one NIC's share of the planned NICs' bytes, at least.
  double single_nic_share = 0.8;
  /// nic.unused: a planned NIC below this fraction of the bytes its GPUs'
  /// share predicts.
  double unused_fraction = 0.05;
};

struct NicFinding {
  std::string id;  // "nic.single-nic"
  Outcome outcome;
};

/// A planned NIC port and the GPUs the plan puts on it.
struct PlannedNic {
  std::string nic;
  int port = 1;
  std::vector<int> gpus;
};

struct NicTrafficReport {
  std::vector<PlannedNic> planned;        // first-use order of the plan
  std::vector<topo::NicTraffic> traffic;  // every NIC port of the node
  std::vector<NicFinding> findings;       // empty: traffic went as planned
  Status worst = Status::pass;            // over findings (skip counts as pass)
};

/// The NIC ports a plan uses and their GPUs; choices without a NIC are left out.
std::vector<PlannedNic> planned_nics(const std::vector<topo::NicChoice>& plan);

/// The plan's choices for `gpus` (snapshot GPU indices; duplicates, as with
/// ranks sharing a GPU, count once), in index order.
std::vector<topo::NicChoice> plan_for_gpus(const std::vector<topo::NicChoice>& all,
                                           const std::vector<int>& gpus);

NicTrafficReport check_nic_traffic(const std::vector<topo::NicChoice>& plan,
                                   const topo::NicCounterSnapshot& before,
                                   const topo::NicCounterSnapshot& after,
                                   const NicTrafficLimits& limits = {});

/// "12.35 GB" (10^9 bytes, as DeepEP's GB/s).
std::string format_gb(std::uint64_t bytes);

/// The NCCL_IB_HCA value that pins one rank to its GPU's NIC: "=mlx5_3:1".
std::string rank_nccl_ib_hca(const topo::NicChoice& choice);

}  // namespace epkit::checks
