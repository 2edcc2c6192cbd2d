// epkit place: usage errors name what is missing; one node orders itself.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <future>
#include <string>
#include <thread>

#include "cli/command.h"
#include "runtime/socket.h"
#include "runtime/store.h"
#include "support/cli_run.h"
#include "support/temp_tree.h"

namespace epkit::cli {
namespace {

using namespace std::chrono_literals;

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

TEST(PlaceCommand, HugeNodeCountsAndTimeoutsAreUsageErrors) {
  test::TempTree tree;
  tree.write("/job.env", "JOB_COMPLETION_INDEX=0\nMASTER_ADDR=127.0.0.1\n");
  auto place = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"place", "--env-file", tree.path("/job.env"), "--addr",
                                     "127.0.0.1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return test::run_epkit(args);
  };
  auto huge = place({"--nnodes", "2000000000"});
  EXPECT_EQ(huge.code, k_exit_usage) << huge.err;
  EXPECT_NE(huge.err.find("at most"), std::string::npos) << huge.err;
  for (std::string timeout : {"1e10", "nan", "NaN", "inf", "-1", "0"}) {
    auto r = place({"--nnodes", "1", "--timeout", timeout});
    EXPECT_EQ(r.code, k_exit_usage) << timeout << ": " << r.err;
  }
  auto index = place({"--nnodes", "2", "--index", "2"});
  EXPECT_EQ(index.code, k_exit_usage) << index.err;
  tree.write("/short.env",
             "JOB_COMPLETION_INDEX=0\nNNODES=1\nMASTER_ADDR=127.0.0.1\n"
             "EPKIT_SECRET=short\n");
  auto secret = test::run_epkit(
      {"place", "--env-file", tree.path("/short.env"), "--addr", "127.0.0.1", "--port", "0"});
  EXPECT_EQ(secret.code, k_exit_usage);
  EXPECT_NE(secret.err.find("EPKIT_SECRET"), std::string::npos) << secret.err;
}

// Index 0 listens on its own address only, not on every interface.
TEST(PlaceCommand, IndexZeroBindsItsOwnAddress) {
  auto probe = runtime::listen_tcp("127.0.0.1", 0);
  ASSERT_TRUE(probe.ok());
  int port = *runtime::local_port(probe->get());
  probe->reset();
  test::TempTree tree;
  tree.write("/job.env",
             "JOB_COMPLETION_INDEX=0\nNNODES=2\nMASTER_ADDR=127.0.0.1\n"
             "EPKIT_SECRET=a-secret-of-sixteen-or-more\n");
  auto running = std::async(std::launch::async, [&] {
    return test::run_epkit({"place", "--env-file", tree.path("/job.env"), "--addr", "127.0.0.1",
                            "--port", std::to_string(port), "--timeout", "1.5"});
  });
  // /proc/net/tcp{,6}: a listener (state 0A) on the port, local address
  // 127.0.0.1 (0100007F), never the wildcard.
  std::string port_hex = fmt::format(":{:04X} ", port);
  std::vector<std::string> listeners;
  for (int tries = 0; tries < 50 && listeners.empty(); ++tries) {
    std::this_thread::sleep_for(20ms);
    for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
      std::ifstream in(table);
      std::string line;
      while (std::getline(in, line)) {
        if (line.find(port_hex) != std::string::npos && line.find(" 0A ") != std::string::npos) {
          listeners.push_back(line);
        }
      }
    }
  }
  auto r = running.get();
  EXPECT_EQ(r.code, k_exit_fail) << r.err;  // index 1 never came
  ASSERT_FALSE(listeners.empty());
  for (const auto& line : listeners) {
    EXPECT_NE(line.find("0100007F" + port_hex.substr(0, 5)), std::string::npos) << line;
  }
  EXPECT_EQ(r.err.find("warning: no EPKIT_SECRET"), std::string::npos) << r.err;
}

// A stranger (the job has no secret) publishes an outcome that puts a shell
// payload at node rank 0: `place --format sh` fails and prints no export
// that a pod script would source.
TEST(PlaceCommand, AForgedRendezvousNeverReachesTheShell) {
  runtime::ServerOptions serve;
  serve.bind_addr = "127.0.0.1";
  serve.world_size = 2;
  serve.tag = "placement";
  auto server = runtime::StoreServer::start(serve);
  ASSERT_TRUE(server.ok());
  runtime::ClientOptions forger;
  forger.port = (*server)->port();
  forger.rank = 0;
  forger.world_size = 2;
  forger.my_host = "forger";
  forger.tag = "placement";
  auto store = runtime::Store::connect(forger, runtime::Deadline::after(2s));
  ASSERT_TRUE(store.ok()) << store.error().message;
  std::string forged =
      R"j({"order":[{"index":0,"addr":"$(touch${IFS}/tmp/x)","node":"a","block":"","subblock":"","host":""},)j"
      R"j({"index":1,"addr":"127.0.0.1","node":"","block":"","subblock":"","host":""}]})j";
  ASSERT_TRUE(store->set("placement/outcome", forged, runtime::Deadline::after(1s)).ok());
  test::TempTree tree;
  tree.write("/job.env", "JOB_COMPLETION_INDEX=1\nNNODES=2\nMASTER_ADDR=127.0.0.1\n");
  auto r = test::run_epkit({"place", "--env-file", tree.path("/job.env"), "--addr", "127.0.0.1",
                            "--port", std::to_string((*server)->port()), "--format", "sh",
                            "--timeout", "3"});
  EXPECT_EQ(r.code, k_exit_fail) << r.err;
  EXPECT_EQ(r.out.find("export"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("$("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("malformed outcome"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("warning: no EPKIT_SECRET"), std::string::npos) << r.err;
  store->close();
}

}  // namespace
}  // namespace epkit::cli
