// Topology-ordered node ranks: made-up GKE placements in shuffled index order
// come out grouped by block, subblock and host, over the real TCP store; a
// node that never reports is named within the timeout.
#include "runtime/placement.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <random>
#include <thread>

#include "runtime/socket.h"
#include "runtime/store.h"

namespace epkit::runtime {
namespace {

using namespace std::chrono_literals;

Placement at(int index, std::string block, std::string subblock, std::string host_label,
             std::string node = {}) {
  Placement p;
  p.index = index;
  p.addr = fmt::format("job-w-0-{}.job", index);
  p.node = node.empty() ? fmt::format("gke-a4-pool-{}", 100 - index) : std::move(node);
  p.block = std::move(block);
  p.subblock = std::move(subblock);
  p.physical_host = std::move(host_label);
  return p;
}

// Eight nodes over two blocks and three subblocks; the indexes Kubernetes
// gave them follow neither.
std::vector<Placement> made_up_cluster() {
  return {
      at(0, "blk-b", "sb-2", "h-07"), at(1, "blk-a", "sb-1", "h-03"),
      at(2, "blk-b", "sb-1", "h-01"), at(3, "blk-a", "sb-0", "h-09"),
      at(4, "blk-a", "sb-1", "h-02"), at(5, "blk-b", "sb-2", "h-05"),
      at(6, "blk-a", "sb-0", "h-04"), at(7, "blk-b", "sb-1", "h-08"),
  };
}
const std::vector<int> k_expected_indexes = {6, 3, 4, 1, 2, 7, 5, 0};

std::vector<int> indexes(const NodeOrder& order) {
  std::vector<int> out;
  for (const auto& p : order.nodes) out.push_back(p.index);
  return out;
}

TEST(Placement, OrdersByBlockSubblockHostWhateverTheIndexes) {
  auto cluster = made_up_cluster();
  std::mt19937 shuffle(7);
  for (int round = 0; round < 5; ++round) {
    std::shuffle(cluster.begin(), cluster.end(), shuffle);
    auto order = order_nodes(cluster);
    ASSERT_TRUE(order.ok()) << order.error().message;
    EXPECT_EQ(indexes(*order), k_expected_indexes);
    EXPECT_EQ(order->node_rank_of(0), 7);
    EXPECT_EQ(order->node_rank_of(6), 0);
    EXPECT_EQ(order->node_rank_of(42), -1);
  }
}

TEST(Placement, UnlabelledNodesGoLastAndThenByNodeName) {
  std::vector<Placement> mixed = {at(0, "", "", "", "node-c"), at(1, "blk-a", "sb-0", "h-1"),
                                  at(2, "", "", "", "node-a"), at(3, "blk-a", "", "", "node-z"),
                                  at(4, "", "", "", "node-b")};
  auto order = order_nodes(mixed);
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(indexes(*order), (std::vector<int>{1, 3, 2, 4, 0}));
}

TEST(Placement, ADuplicateIndexIsAnError) {
  auto order = order_nodes({at(1, "a", "b", "c"), at(1, "a", "b", "d")});
  ASSERT_FALSE(order.ok());
  EXPECT_NE(order.error().message.find("index 1 reported twice"), std::string::npos);
}

TEST(Placement, EncodeDecodeRoundTripsAndBadInputIsNamed) {
  auto p = at(5, "blk-b", "sb-2", "h-05");
  auto back = decode_placement(encode(p));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->index, 5);
  EXPECT_EQ(back->addr, p.addr);
  EXPECT_EQ(back->node, p.node);
  EXPECT_EQ(back->block, "blk-b");
  EXPECT_EQ(back->subblock, "sb-2");
  EXPECT_EQ(back->physical_host, "h-05");
  EXPECT_FALSE(decode_placement("not json").ok());
  auto no_index = decode_placement(R"({"addr":"a"})");
  ASSERT_FALSE(no_index.ok());
  EXPECT_NE(no_index.error().message.find("'index'"), std::string::npos);
  auto bad_block = decode_placement(
      R"({"index":1,"addr":"a","node":"n","block":"two words","subblock":"","host":""})");
  ASSERT_FALSE(bad_block.ok());
  EXPECT_NE(bad_block.error().message.find("block"), std::string::npos);
}

TEST(Placement, ReadsTheLabelsThePodWasGiven) {
  host::Env env({{"EPKIT_TOPOLOGY_BLOCK", "blk-a"},
                 {"EPKIT_TOPOLOGY_SUBBLOCK", "sb-1"},
                 {"EPKIT_TOPOLOGY_HOST", "h-3"},
                 {"EPKIT_NODE_NAME", "gke-node-1"}});
  auto p = placement_from_env(env, 3, "job-w-0-3.job");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->block, "blk-a");
  EXPECT_EQ(p->physical_host, "h-3");
  EXPECT_EQ(p->node, "gke-node-1");
  env.set("EPKIT_TOPOLOGY_SUBBLOCK", "sb 1");
  auto bad = placement_from_env(env, 3, "job-w-0-3.job");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("EPKIT_TOPOLOGY_SUBBLOCK"), std::string::npos);
  EXPECT_FALSE(placement_from_env(host::Env(), 0, "").ok());
}

// A free port for index 0 to serve on (the others need to know it up front,
// as pods know MASTER_PORT).
std::uint16_t free_port() {
  auto listener = listen_tcp("127.0.0.1", 0);
  if (!listener) throw std::runtime_error(listener.error().message);
  auto port = local_port(listener->get());
  if (!port) throw std::runtime_error(port.error().message);
  return *port;
}

TEST(Placement, EveryNodeOfAShuffledJobGetsTheTopologyRankOverTheStore) {
  auto cluster = made_up_cluster();
  std::uint16_t port = free_port();
  ExchangeOptions options;
  options.nnodes = static_cast<int>(cluster.size());
  options.bind_addr = "127.0.0.1";
  options.port = port;
  // Start the nodes in a shuffled order, index 0 not first: the others retry.
  std::mt19937 shuffle(11);
  std::shuffle(cluster.begin(), cluster.end(), shuffle);
  std::vector<std::future<Result<NodeOrder>>> nodes;
  for (const auto& p : cluster) {
    nodes.push_back(std::async(std::launch::async, [p, options] {
      return exchange_placements(p, options, Deadline::after(10s));
    }));
    std::this_thread::sleep_for(10ms);
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    auto order = nodes[i].get();
    ASSERT_TRUE(order.ok()) << "index " << cluster[i].index << ": " << order.error().message;
    EXPECT_EQ(indexes(*order), k_expected_indexes);
    EXPECT_EQ(order->node_rank_of(cluster[i].index),
              std::find(k_expected_indexes.begin(), k_expected_indexes.end(), cluster[i].index) -
                  k_expected_indexes.begin());
  }
}

TEST(Placement, ANodeThatNeverReportsIsNamedWithinTheTimeout) {
  auto cluster = made_up_cluster();
  cluster.resize(4);
  std::uint16_t port = free_port();
  ExchangeOptions options;
  options.nnodes = 4;
  options.bind_addr = "127.0.0.1";
  options.port = port;
  auto start = Clock::now();
  std::vector<std::future<Result<NodeOrder>>> nodes;
  for (int i : {0, 1, 3}) {  // index 2 never starts
    nodes.push_back(std::async(std::launch::async, [p = cluster[i], options] {
      return exchange_placements(p, options, Deadline::after(1500ms));
    }));
  }
  // Index 0 decides; the others report its verdict.
  for (auto& node : nodes) {
    auto order = node.get();
    ASSERT_FALSE(order.ok());
    EXPECT_EQ(order.error().code, ErrorCode::timeout) << order.error().message;
    EXPECT_NE(order.error().message.find("'placement/2'"), std::string::npos)
        << order.error().message;
    EXPECT_NE(order.error().message.find("rank 2 (never connected)"), std::string::npos)
        << order.error().message;
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 2.5);
}

TEST(Placement, TheOthersGetIndexZerosVerdictWhenTheyWouldWaitLonger) {
  auto cluster = made_up_cluster();
  ExchangeOptions options;
  options.nnodes = 3;
  options.bind_addr = "127.0.0.1";
  options.port = free_port();
  auto start = Clock::now();
  auto zero = std::async(std::launch::async, [p = cluster[0], options] {
    return exchange_placements(p, options, Deadline::after(1000ms));
  });
  auto one = std::async(std::launch::async, [p = cluster[1], options] {
    return exchange_placements(p, options, Deadline::after(20s));
  });
  auto verdict = one.get();
  ASSERT_FALSE(verdict.ok());
  EXPECT_EQ(verdict.error().code, ErrorCode::timeout);
  EXPECT_NE(verdict.error().message.find("'placement/2'"), std::string::npos)
      << verdict.error().message;
  EXPECT_NE(verdict.error().message.find("as index 0 saw it"), std::string::npos)
      << verdict.error().message;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 3.0);
  EXPECT_FALSE(zero.get().ok());
}

// ---- forged outcomes and hostile values (docs/runtime.md, "Threat model")

std::string outcome_of(std::vector<Placement> nodes) {
  return encode_outcome(NodeOrder{std::move(nodes)});
}

TEST(PlacementThreats, ForgedOutcomesAreNamedErrorsNeverAnOrderWithoutThisNode) {
  auto a = at(0, "b", "s", "h");
  auto b = at(1, "b", "s", "h");
  auto evil = a;
  evil.addr = "$(touch${IFS}/tmp/x)";
  std::vector<std::string> forged = {
      R"({"error":5})",
      R"({"error":"x","code":"bad"})",
      R"({"error":"x","code":99})",
      R"({"error":"\u001b]0;pwned\u0007","code":1})",
      R"({"order":[]})",
      R"({"order":{}})",
      R"({"order":[1,2]})",
      R"({"order":[],"error":"x","code":1})",
      R"({})",
      R"([1,2])",
      R"("order")",
      "not json",
      std::string(100000, '['),
      outcome_of({a}),
      outcome_of({a, a}),
      outcome_of({a, b, at(2, "b", "s", "h")}),
      outcome_of({a, at(5, "b", "s", "h")}),
      // Written by hand: encode() would not carry the shell payload's `$`.
      R"j({"order":[{"index":0,"addr":"$(touch${IFS}/tmp/x)","node":"","block":"","subblock":"","host":""},)j"
      R"j({"index":1,"addr":"n1","node":"","block":"","subblock":"","host":""}]})j",
      R"({"order":[{"index":0,"addr":"n0","node":"","block":"","subblock":"","host":""},)"
      R"({"index":1.5,"addr":"n1","node":"","block":"","subblock":"","host":""}]})",
      R"({"order":[{"index":0,"addr":"n0","node":"","block":"","subblock":"","host":""},)"
      R"({"index":1,"addr":"n1","node":"","block":"","subblock":"","host":7}]})",
  };
  for (const auto& text : forged) {
    auto order = decode_outcome(text, 2);
    ASSERT_FALSE(order.ok()) << text.substr(0, 200);
    if (text.find("\"error\":\"x\",\"code\":1}") == std::string::npos) {
      EXPECT_EQ(order.error().code, ErrorCode::invalid) << text.substr(0, 200);
    }
    for (char c : order.error().message) {
      EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20) << order.error().message;
    }
  }
  auto good = decode_outcome(outcome_of({b, a}), 2);
  ASSERT_TRUE(good.ok()) << good.error().message;
  EXPECT_EQ(good->node_rank_of(0), 1);
  auto verdict = decode_outcome(R"({"error":"placement/1 never came","code":6})", 2);
  ASSERT_FALSE(verdict.ok());
  EXPECT_EQ(verdict.error().code, ErrorCode::timeout);
}

TEST(PlacementThreats, ValuesHoldOnlyAddressCharacters) {
  for (std::string bad :
       std::vector<std::string>{"$(id)", "`id`", "a b", "a\nb", "\x1b[2J", "caf\xc3\xa9", "a;b",
                                "a'b", std::string(254, 'a')}) {
    EXPECT_FALSE(check_placement_value("node", bad).ok()) << bad;
    auto p = at(1, "b", "s", "h");
    p.node = bad;
    EXPECT_FALSE(decode_placement(encode(p)).ok()) << bad;
  }
  EXPECT_TRUE(check_placement_value("addr", "fe80::1").ok());
  EXPECT_TRUE(check_placement_value("addr", "job-w-0-1.job.svc").ok());
  // An index out of the job's range is not a placement of this job.
  EXPECT_FALSE(decode_placement(encode(at(9, "b", "s", "h")), 3).ok());
  EXPECT_FALSE(
      decode_placement(R"({"index":-1,"addr":"a","node":"","block":"","subblock":"","host":""})")
          .ok());
  EXPECT_FALSE(
      decode_placement(
          R"({"index":4294967296,"addr":"a","node":"","block":"","subblock":"","host":""})")
          .ok());
}

// A node that is not index 0 takes a forged outcome another peer published
// (a store without a secret lets anyone in) as a named error: no crash, no
// order, no node rank -1.
TEST(PlacementThreats, AForgedOutcomeOverTheStoreFailsTheNodeCleanly) {
  for (std::string forged : {std::string(R"({"error":5})"), std::string(R"({"order":[]})"),
                             outcome_of({at(0, "b", "s", "h"), at(3, "b", "s", "h")}),
                             outcome_of({at(0, "b", "s", "h"), at(1, "x", "s", "h")})}) {
    ServerOptions serve;
    serve.bind_addr = "127.0.0.1";
    serve.world_size = 2;
    serve.tag = "placement";
    auto server = StoreServer::start(serve);
    ASSERT_TRUE(server.ok());
    ClientOptions forger;
    forger.port = (*server)->port();
    forger.rank = 0;
    forger.world_size = 2;
    forger.my_host = "forger";
    forger.tag = "placement";
    auto store = Store::connect(forger, Deadline::after(2s));
    ASSERT_TRUE(store.ok()) << store.error().message;
    ASSERT_TRUE(store->set("placement/outcome", forged, Deadline::after(1s)).ok());
    ExchangeOptions options;
    options.nnodes = 2;
    options.port = (*server)->port();
    auto start = Clock::now();
    auto order = exchange_placements(at(1, "b", "s", "h"), options, Deadline::after(3s));
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 3.0);
    ASSERT_FALSE(order.ok()) << forged;
    EXPECT_EQ(order.error().code, ErrorCode::invalid) << order.error().message;
    store->close();
  }
}

TEST(PlacementThreats, WithASecretTheNodesMeetAndAStrangerIsRefused) {
  auto cluster = made_up_cluster();
  ExchangeOptions options;
  options.nnodes = 2;
  options.bind_addr = "127.0.0.1";
  options.port = free_port();
  options.secret = "placement-secret-0123456789";
  auto zero = std::async(std::launch::async, [p = cluster[0], options] {
    return exchange_placements(p, options, Deadline::after(5s));
  });
  std::this_thread::sleep_for(200ms);
  // A stranger without the secret cannot publish anything.
  ClientOptions stranger;
  stranger.port = options.port;
  stranger.rank = 1;
  stranger.world_size = 2;
  stranger.tag = "placement";
  auto refused = Store::connect(stranger, Deadline::after(2s));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("refused"), std::string::npos);
  auto one = exchange_placements(cluster[1], options, Deadline::after(5s));
  ASSERT_TRUE(one.ok()) << one.error().message;
  auto order = zero.get();
  ASSERT_TRUE(order.ok()) << order.error().message;
  EXPECT_EQ(indexes(*one), indexes(*order));
}

// Index 0 may have every placement and publish the outcome before a node
// that already published its own has said it waits for the outcome: the
// store must stay up until that node read it too.
TEST(Placement, IndexZeroWaitsForANodeThatReportsLate) {
  auto cluster = made_up_cluster();
  ExchangeOptions options;
  options.nnodes = 2;
  options.bind_addr = "127.0.0.1";
  options.port = free_port();
  auto zero = std::async(std::launch::async, [p = cluster[0], options] {
    return exchange_placements(p, options, Deadline::after(5s));
  });
  ClientOptions late;
  late.port = options.port;
  late.rank = 1;
  late.world_size = 2;
  late.my_host = "late";
  late.tag = options.tag;
  auto store = Store::connect(late, Deadline::after(3s));
  ASSERT_TRUE(store.ok()) << store.error().message;
  ASSERT_TRUE(store->set("placement/1", encode(cluster[1]), Deadline::after(1s)).ok());
  std::this_thread::sleep_for(300ms);  // index 0 orders and publishes meanwhile
  ASSERT_TRUE(store->add("placement/reported", 1, Deadline::after(1s)).ok());
  auto outcome = store->get("placement/outcome", Deadline::after(2s));
  ASSERT_TRUE(outcome.ok()) << outcome.error().message;
  EXPECT_TRUE(decode_outcome(*outcome, 2).ok());
  (void)store->add("placement/read", 1, Deadline::after(1s));
  store->close();
  EXPECT_TRUE(zero.get().ok());
}

}  // namespace
}  // namespace epkit::runtime
