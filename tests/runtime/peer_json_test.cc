// What other processes send through the store, read without a throwing
// accessor: wrong types, missing keys, control characters and deep nesting
// are named errors (or a failed result), never an exception or raw bytes.
#include "runtime/peer_json.h"

#include <gtest/gtest.h>

#include <string>

#include "bench/ep_bench_low_latency.h"
#include "runtime/connectivity_result.h"
#include "runtime/facts.h"

namespace epkit::runtime {
namespace {

TEST(PeerJson, AccessorsCheckPresenceTypeRangeAndCharacters) {
  auto j =
      peer::parse(R"({"s":"ok","c":"a\u001bb","n":5,"big":18446744073709551615,"f":1.5,"b":true})");
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(peer::string_field(j, "s").value_or(""), "ok");
  EXPECT_FALSE(peer::string_field(j, "c"));  // ESC
  EXPECT_FALSE(peer::string_field(j, "n"));
  EXPECT_FALSE(peer::string_field(j, "missing"));
  EXPECT_EQ(peer::int_field(j, "n", 0, 10).value_or(-1), 5);
  EXPECT_FALSE(peer::int_field(j, "n", 6, 10));
  EXPECT_FALSE(peer::int_field(j, "big"));
  EXPECT_FALSE(peer::int_field(j, "f"));
  EXPECT_FALSE(peer::int_field(j, "s"));
  EXPECT_EQ(peer::number_field(j, "f").value_or(0), 1.5);
  EXPECT_FALSE(peer::number_field(j, "b"));
  EXPECT_TRUE(peer::bool_field(j, "b").value_or(false));
  EXPECT_FALSE(peer::bool_field(j, "n"));
  // Not an object: every accessor says absent.
  for (const char* text : {"[1]", "5", "\"x\"", "null"}) {
    auto v = peer::parse(text);
    EXPECT_FALSE(peer::string_field(v, "s"));
    EXPECT_FALSE(peer::int_field(v, "n"));
    EXPECT_EQ(peer::field(v, "n"), nullptr);
  }
  EXPECT_FALSE(peer::string_field(peer::parse("{\"c\":\"\xc2\x9b"
                                              "2J\"}"),
                                  "c"));  // C1 CSI
  EXPECT_TRUE(peer::parse(std::string(100000, '[')).is_discarded());
  EXPECT_TRUE(peer::parse("{\"s\":\"\xff\"}").is_discarded());  // invalid UTF-8
  EXPECT_TRUE(peer::parse(std::string(2 << 20, ' ')).is_discarded());
}

TEST(PeerJson, RankFactsWithWrongTypesOrControlCharactersAreNamed) {
  RankFacts f;
  f.rank = 1;
  f.host = "node-b";
  f.hcas = {"mlx5_0"};
  f.network_env = {{"NCCL_IB_HCA", "mlx5_0"}};
  auto good = facts_from_json(facts_to_json(f));
  ASSERT_TRUE(good.ok()) << good.error().message;
  EXPECT_EQ(good->host, "node-b");
  auto replace = [&](const std::string& from, const std::string& to) {
    auto text = facts_to_json(f);
    auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  for (const auto& bad :
       {replace("\"rank\":1", "\"rank\":\"1\""), replace("\"rank\":1", "\"rank\":-1"),
        replace("\"host\":\"node-b\"", "\"host\":\"\\u001b]0;x\\u0007\""),
        replace("\"host\":\"node-b\"", "\"host\":7"), replace("[\"mlx5_0\"]", "[5]"),
        replace("[\"mlx5_0\"]", "{}"), replace("\"shared_gpu\":false", "\"shared_gpu\":\"no\""),
        std::string("[]"), std::string("{}")}) {
    auto facts = facts_from_json(bad);
    EXPECT_FALSE(facts.ok()) << bad;
  }
  // Invalid UTF-8 in this rank's own facts (a sysfs string) does not throw.
  f.driver_version = "\xff\xfe";
  EXPECT_NO_THROW((void)facts_to_json(f));
}

TEST(PeerJson, TestResultsFromPeersAreCheckedFieldByField) {
  auto good = checked_connectivity_result(
      R"({"rank":2,"label":"b:2","ok":true,"reason":"","gpu_name":"H100","gpu_uuid":"GPU-1",)"
      R"("gpu_pci_bus_id":"0000:01:00.0","compute_capability":"9.0","wrong_all_reduce":0,)"
      R"("wrong_ring":0,"transports":[{"from":1,"to":2,"transport":"P2P/IPC"}]})",
      2);
  EXPECT_TRUE(good.value("ok", false));
  EXPECT_EQ(good["transports"].size(), 1u);
  for (std::string bad :
       {std::string("not json"), std::string(R"({"ok":"yes"})"),
        std::string(R"({"rank":2,"ok":1})"), std::string(R"({"rank":3,"ok":true})"),
        std::string(R"({"rank":2,"ok":true,"label":"\u001b[2J","reason":"","gpu_name":"",)"
                    R"("gpu_uuid":"","gpu_pci_bus_id":"","compute_capability":"",)"
                    R"("wrong_all_reduce":0,"wrong_ring":0,"transports":[]})"),
        std::string(R"({"rank":2,"label":"b","ok":true,"reason":"","gpu_name":"","gpu_uuid":"",)"
                    R"("gpu_pci_bus_id":"","compute_capability":"","wrong_all_reduce":0,)"
                    R"("wrong_ring":0,"transports":[{"from":"x","to":2,"transport":"P2P"}]})")}) {
    auto result = checked_connectivity_result(bad, 2);
    // A failed rank, named; what rank 0 prints from it cannot throw.
    EXPECT_FALSE(result.value("ok", true)) << bad;
    EXPECT_NE(result.value("reason", "").find("rank 2 sent a malformed result"), std::string::npos);
    EXPECT_NO_THROW((void)result.dump());
  }
}

TEST(PeerJson, BenchEpLowLatencyTimesWithWrongTypesAreRefused) {
  bench::EpLowLatencyRun run;
  auto j = bench::to_json(run);
  bench::EpLowLatencyRun back;
  ASSERT_TRUE(bench::from_json(j, back));
  j["dispatch_bytes"] = "many";
  EXPECT_NO_THROW(EXPECT_FALSE(bench::from_json(j, back)));
}

}  // namespace
}  // namespace epkit::runtime
