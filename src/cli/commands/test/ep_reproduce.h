// The command line that repeats a failed `epkit test ep` run: the seed, the
// shape and the launch (nodes, ranks per node, GPU sharing), so that a
// failure seen on a multi-node job is repeated on the same shape.
#pragma once

#include <cstdint>
#include <string>

namespace epkit::cli {

struct EpReproduce {
  std::string mode = "normal";  // --mode; named only when not the default
  std::uint64_t seed = 0;
  int tokens = 0;
  int hidden = 0;
  int topk = 0;
  int experts = 0;
  int sms = 0;
  int ranks = 1;           // in all
  int nnodes = 1;          // the launch's
  int nproc_per_node = 1;  // the launch's local ranks
  bool oversubscribe = false;
  std::string network_leg = "nccl";  // --network-leg; named only when not the default
  double nic_gbps = 50;              // the emulated NIC's, named with it
  double nic_latency_us = 2;
  bool leg_overlap = false;  // --leg-overlap
  bool rings = false;        // --rings
  int ring_rows = 0;         // --ring-rows, named when set
};

/// "epkit test ep [--mode low-latency] --seed 7 ... --nproc-per-node 4"; across nodes
/// "... --nnodes 2 --nproc-per-node 2 [--oversubscribe] (on every node, with
/// its --node-rank and the same --master)".
std::string ep_reproduce_command(const EpReproduce& r);

}  // namespace epkit::cli
