// The line `epkit test ep` prints after a failed case repeats the run's
// shape and launch.
#include "cli/commands/test/ep_reproduce.h"

#include <gtest/gtest.h>

namespace epkit::cli {
namespace {

EpReproduce base() {
  EpReproduce r;
  r.seed = 717991210;
  r.tokens = 1024;
  r.hidden = 7168;
  r.topk = 8;
  r.experts = 256;
  r.sms = 24;
  return r;
}

TEST(EpReproduce, OneNodeNamesTheRankCount) {
  EpReproduce r = base();
  r.ranks = 4;
  r.nproc_per_node = 4;
  EXPECT_EQ(ep_reproduce_command(r),
            "epkit test ep --seed 717991210 --tokens 1024 --hidden 7168 --topk 8 --experts 256 "
            "--sms 24 --nproc-per-node 4");
  r.oversubscribe = true;
  EXPECT_EQ(ep_reproduce_command(r),
            "epkit test ep --seed 717991210 --tokens 1024 --hidden 7168 --topk 8 --experts 256 "
            "--sms 24 --nproc-per-node 4 --oversubscribe");
}

TEST(EpReproduce, AcrossNodesNamesTheNodeFlags) {
  EpReproduce r = base();
  r.ranks = 4;
  r.nnodes = 2;
  r.nproc_per_node = 2;
  r.oversubscribe = true;
  EXPECT_EQ(ep_reproduce_command(r),
            "epkit test ep --seed 717991210 --tokens 1024 --hidden 7168 --topk 8 --experts 256 "
            "--sms 24 --nnodes 2 --nproc-per-node 2 --oversubscribe (on every node, with its "
            "--node-rank and the same --master)");
  r.oversubscribe = false;
  r.ranks = 16;
  r.nproc_per_node = 8;
  EXPECT_EQ(ep_reproduce_command(r),
            "epkit test ep --seed 717991210 --tokens 1024 --hidden 7168 --topk 8 --experts 256 "
            "--sms 24 --nnodes 2 --nproc-per-node 8 (on every node, with its --node-rank and the "
            "same --master)");
}

TEST(EpReproduce, EmulatedLegIsNamedWithItsNic) {
  EpReproduce r = base();
  r.ranks = 2;
  r.nnodes = 2;
  r.nproc_per_node = 1;
  r.network_leg = "emulated";
  r.nic_gbps = 12.5;
  EXPECT_EQ(ep_reproduce_command(r),
            "epkit test ep --seed 717991210 --tokens 1024 --hidden 7168 --topk 8 --experts 256 "
            "--sms 24 --nnodes 2 --network-leg emulated --nic-gbps 12.5 --nic-latency-us 2 "
            "--nproc-per-node 1 (on every node, with its --node-rank and the same --master)");
  r.leg_overlap = true;
  EXPECT_EQ(ep_reproduce_command(r),
            "epkit test ep --seed 717991210 --tokens 1024 --hidden 7168 --topk 8 --experts 256 "
            "--sms 24 --nnodes 2 --network-leg emulated --nic-gbps 12.5 --nic-latency-us 2 "
            "--leg-overlap --nproc-per-node 1 (on every node, with its --node-rank and the same "
            "--master)");
  r.leg_overlap = false;
  r.rings = true;
  r.ring_rows = 4;
  EXPECT_EQ(ep_reproduce_command(r),
            "epkit test ep --seed 717991210 --tokens 1024 --hidden 7168 --topk 8 --experts 256 "
            "--sms 24 --nnodes 2 --network-leg emulated --nic-gbps 12.5 --nic-latency-us 2 "
            "--rings --ring-rows 4 --nproc-per-node 1 (on every node, with its --node-rank and the "
            "same --master)");
}

TEST(EpReproduce, LowLatencyModeIsNamed) {
  EpReproduce r = base();
  r.mode = "low-latency";
  r.ranks = 2;
  EXPECT_EQ(
      ep_reproduce_command(r),
      "epkit test ep --mode low-latency --seed 717991210 --tokens 1024 --hidden 7168 --topk 8 "
      "--experts 256 --sms 24 --nproc-per-node 2");
}

}  // namespace
}  // namespace epkit::cli
