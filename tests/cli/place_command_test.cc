// epkit place: usage errors name what is missing; one node orders itself.
#include <gtest/gtest.h>

#include <string>

#include "cli/command.h"
#include "support/cli_run.h"
#include "support/temp_tree.h"

namespace epkit::cli {
namespace {

TEST(PlaceCommand, MissingIndexOrBadLabelIsAUsageError) {
  test::TempTree tree;
  tree.write("/job.env", "NNODES=2\nMASTER_ADDR=127.0.0.1\n");
  auto r = test::run_epkit({"place", "--env-file", tree.path("/job.env"), "--addr", "n0"});
  EXPECT_EQ(r.code, k_exit_usage);
  EXPECT_NE(r.err.find("JOB_COMPLETION_INDEX"), std::string::npos) << r.err;

  tree.write("/bad.env",
             "JOB_COMPLETION_INDEX=0\nNNODES=1\nMASTER_ADDR=127.0.0.1\n"
             "EPKIT_TOPOLOGY_BLOCK=two words\n");
  auto bad = test::run_epkit({"place", "--env-file", tree.path("/bad.env"), "--addr", "n0"});
  EXPECT_EQ(bad.code, k_exit_usage);
  EXPECT_NE(bad.err.find("EPKIT_TOPOLOGY_BLOCK"), std::string::npos) << bad.err;

  tree.write("/nan.env", "JOB_COMPLETION_INDEX=one\nNNODES=1\n");
  auto nan = test::run_epkit({"place", "--env-file", tree.path("/nan.env")});
  EXPECT_EQ(nan.code, k_exit_usage);
  EXPECT_NE(nan.err.find("JOB_COMPLETION_INDEX='one'"), std::string::npos) << nan.err;
}

TEST(PlaceCommand, OneNodeIsRankZeroAndPrintsShellExports) {
  test::TempTree tree;
  tree.write("/job.env",
             "JOB_COMPLETION_INDEX=0\nNNODES=1\nMASTER_ADDR=127.0.0.1\nMASTER_PORT=0\n"
             "EPKIT_TOPOLOGY_BLOCK=blk-a\nEPKIT_NODE_NAME=node-a\n");
  // MASTER_PORT=0 is not a port: named.
  auto zero = test::run_epkit({"place", "--env-file", tree.path("/job.env"), "--addr", "n0"});
  EXPECT_EQ(zero.code, k_exit_usage);
  tree.write("/job.env",
             "JOB_COMPLETION_INDEX=0\nNNODES=1\nMASTER_ADDR=127.0.0.1\n"
             "EPKIT_TOPOLOGY_BLOCK=blk-a\nEPKIT_NODE_NAME=node-a\n");
  auto r = test::run_epkit({"place", "--env-file", tree.path("/job.env"), "--addr", "127.0.0.1",
                            "--port", "0", "--format", "sh", "--timeout", "5"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("export EPKIT_NODE_RANK=0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("export EPKIT_MASTER=127.0.0.1:29500\n"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("blk-a"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace epkit::cli
