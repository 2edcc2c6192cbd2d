// Logs as people paste them: excerpts without rank prefixes, kubectl tails,
// mpirun and torchrun output, hosts compared, and inputs that are not logs
// (fixtures/logs/pasted/).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "analyze_text.h"
#include "logs/analyzer.h"
#include "logs/line_parser.h"
#include "logs/reader.h"
#include "support/cli_run.h"
#include "support/paths.h"
#include "support/temp_tree.h"

namespace epkit::logs {
namespace {

Report analyze_fixture(const std::string& name) {
  auto report = analyze_inputs({test::source_path("fixtures/logs/pasted/" + name)}, {});
  EXPECT_TRUE(report.ok()) << report.error().message;
  return report.ok() ? std::move(*report) : Report{};
}

Report analyze_lines(std::string_view text) {
  return test_util::analyze_text(text, {}, "paste.log");
}

std::set<std::string> ids_of(const Report& r) {
  std::set<std::string> out;
  for (const auto& f : r.findings) out.insert(std::string(f.spec->id));
  return out;
}

TEST(LogsPastedParser, LauncherAndCollectorPrefixes) {
  auto mpi = parse_line("[1,3]<stdout>:node2:77:78 [1] NCCL INFO Using network IB");
  EXPECT_EQ(mpi.launcher_rank, 3);
  EXPECT_EQ(mpi.rank_key, "node2:77");
  EXPECT_EQ(mpi.message, "Using network IB");
  EXPECT_EQ(parse_line("[prterun-h1-4242@1,7]<stderr>: text").launcher_rank, 7);
  auto pod = parse_line(
      "[pod/worker-1/trainer] 2025-06-02T09:14:27.455630912Z NCCL WARN Failed to initialize any "
      "NET plugin");
  EXPECT_EQ(pod.pod, "worker-1");
  EXPECT_EQ(pod.level, Level::warn);
  EXPECT_EQ(pod.launcher_rank, -1);
  auto stamped = parse_line("2025-06-02T09:14:27Z [rank2]:hello");
  EXPECT_EQ(stamped.launcher_rank, 2);
  EXPECT_EQ(stamped.message, "hello");
  // Look-alikes are not prefixes.
  EXPECT_EQ(parse_line("[1,3] text").launcher_rank, -1);
  EXPECT_EQ(parse_line("[1,x]<stdout>:text").launcher_rank, -1);
  EXPECT_EQ(parse_line("[pod/x] y").pod, "");
  EXPECT_EQ(parse_line("2025-06-02 09:14:27 text").message, "2025-06-02 09:14:27 text");
}

TEST(LogsPasted, ChatExcerptFindingsSayRankUnknown) {
  Report r = analyze_fixture("chat-excerpt.log");
  EXPECT_EQ(ids_of(r), (std::set<std::string>{"nccl.memlock", "nccl.init-incomplete"}));
  EXPECT_TRUE(r.ranks.empty());
  const Finding* memlock = r.find("nccl.memlock");
  ASSERT_NE(memlock, nullptr);
  EXPECT_EQ(memlock->count, 2u);
  EXPECT_EQ(memlock->unranked, 2u);
  EXPECT_TRUE(memlock->ranks.empty());
  ASSERT_FALSE(memlock->evidence.empty());
  EXPECT_EQ(memlock->evidence[0].rank, -1);
  EXPECT_EQ(memlock->evidence[0].line, 6u);
  // The facts of lines without a rank are kept apart, not dropped.
  EXPECT_EQ(r.unranked.nccl_version, "2.21.5+cuda12.4");
  EXPECT_EQ(r.unranked.network, "IB");
  EXPECT_EQ(r.unranked.net_devices, (std::vector<std::string>{"mlx5_2:1/IB", "mlx5_3:1/IB"}));
  // Init START of NCCL rank 11 with no prefix: seen (a hang), not "no log line".
  const Finding* init = r.find("nccl.init-incomplete");
  ASSERT_NE(init, nullptr);
  EXPECT_EQ(init->spec->rule, Rule::init_incomplete);
  ASSERT_EQ(init->details.size(), 1u);
  EXPECT_NE(init->details[0].find("11 (rank ?: its lines have no rank prefix)"), std::string::npos)
      << init->details[0];
  EXPECT_TRUE(r.not_logs.empty());
}

TEST(LogsPasted, KubectlTailWithPodAndTimestampPrefixes) {
  Report r = analyze_fixture("kubectl-tail.log");
  EXPECT_EQ(ids_of(r), (std::set<std::string>{"nccl.net-mismatch", "nccl.socket-fallback",
                                              "rdma.provider-abi"}));
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_EQ(r.ranks[0].label, "moe-train-worker-0:61");
  EXPECT_EQ(r.ranks[1].network, "Socket");
  // Socket on one of two hosts: a warning, not the single-host note.
  EXPECT_EQ(r.find("nccl.socket-fallback")->spec->rule, Rule::socket_fallback);
  // The libibverbs line carries only the pod prefix: its rank is unknown.
  const Finding* abi = r.find("rdma.provider-abi");
  ASSERT_NE(abi, nullptr);
  EXPECT_EQ(abi->unranked, 1u);
  EXPECT_EQ(abi->evidence[0].line, 5u);
  ASSERT_EQ(r.hosts.size(), 2u);
  EXPECT_EQ(r.hosts[1].name, "moe-train-worker-1");
  EXPECT_EQ(r.hosts[1].network, "Socket");
}

TEST(LogsPasted, MpirunCommandLineAndTagOutput) {
  Report r = analyze_fixture("mpirun-tag-output.log");
  EXPECT_EQ(ids_of(r), std::set<std::string>{"nccl.duplicate-gpu"});
  ASSERT_EQ(r.launches.size(), 1u);
  EXPECT_EQ(r.launches[0].hosts, (std::vector<std::string>{"gpu-a07", "gpu-a08"}));
  EXPECT_EQ(r.launches[0].env,
            (std::vector<std::string>{"NCCL_DEBUG=INFO", "NCCL_IB_HCA=mlx5_0,mlx5_1"}));
  const Finding* dup = r.find("nccl.duplicate-gpu");
  ASSERT_NE(dup, nullptr);
  EXPECT_EQ(dup->rank_count, 2u);
  EXPECT_EQ(dup->ranks, (std::vector<std::string>{"gpu-a07:73121", "gpu-a08:51878"}));
  EXPECT_EQ(dup->details, std::vector<std::string>{"CUDA device (bus id) 18000"});
  EXPECT_EQ(dup->unranked, 0u);
  // [1,N]<stdout>: maps lines to MPI ranks; the bare version line joins rank 0.
  bool found = false;
  for (const auto& rank : r.ranks) {
    if (rank.label == "gpu-a07:73120") {
      found = true;
      EXPECT_EQ(rank.launcher_rank, 0);
      EXPECT_EQ(rank.nccl_version, "2.19.3+cuda12.3");
    }
  }
  EXPECT_TRUE(found);
  ASSERT_EQ(r.hosts.size(), 2u);  // from -H, the nccl-tests header and the NCCL prefixes
}

TEST(LogsPasted, TorchrunRewrittenPrefixesNameTheRanks) {
  Report r = analyze_fixture("torchrun-prefix.log");
  EXPECT_EQ(ids_of(r), std::set<std::string>{"nccl.memlock"});
  const Finding* memlock = r.find("nccl.memlock");
  ASSERT_NE(memlock, nullptr);
  EXPECT_EQ(memlock->ranks, (std::vector<std::string>{"rank 3", "rank 5"}));
  EXPECT_EQ(memlock->unranked, 0u);
}

TEST(LogsPasted, TwoHostsOneWithoutTheNetPlugin) {
  Report r = analyze_fixture("two-host-plugin.log");
  EXPECT_EQ(ids_of(r), (std::set<std::string>{"nccl.host-mismatch", "nccl.net-mismatch"}));
  std::vector<const Finding*> host_findings;
  for (const auto& f : r.findings)
    if (f.spec->id == "nccl.host-mismatch") host_findings.push_back(&f);
  ASSERT_EQ(host_findings.size(), 1u);  // loaded or not; the library differs only where loaded
  const Finding& f = *host_findings[0];
  EXPECT_EQ(f.spec->rule, Rule::host_plugin);
  EXPECT_EQ(f.hosts, (std::vector<std::string>{"ib-node-11", "ib-node-12"}));
  EXPECT_EQ(f.details,
            (std::vector<std::string>{"NET plugin external NCCL RDMA Plugin: 1 host (ib-node-11)",
                                      "NET plugin internal (none found): 1 host (ib-node-12)"}));
  ASSERT_EQ(f.evidence.size(), 2u);
  EXPECT_EQ(f.evidence[0].line, 2u);
  EXPECT_EQ(f.evidence[1].line, 10u);
  EXPECT_EQ(r.hosts[0].plugin_path, "/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so");
  EXPECT_EQ(r.hosts[1].plugin_path, "libnccl-net.so");
}

TEST(LogsPasted, HostsComparedWithoutRanks) {
  // kubectl --prefix names the pod; the lines themselves carry no NCCL prefix.
  Report r = analyze_lines(
      "[pod/w-0/main] NCCL version 2.21.5+cuda12.4\n"
      "[pod/w-1/main] NCCL version 2.26.2+cuda12.8\n"
      "[pod/w-2/main] NCCL version 2.26.2+cuda12.8\n");
  EXPECT_TRUE(r.ranks.empty());
  const Finding* f = r.find("nccl.host-mismatch");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->spec->rule, Rule::host_version);
  EXPECT_EQ(f->count, 1u);
  EXPECT_EQ(f->details, (std::vector<std::string>{"NCCL 2.21.5+cuda12.4: 1 host (w-0)",
                                                  "NCCL 2.26.2+cuda12.8: 2 hosts (w-1, w-2)"}));
  EXPECT_EQ(r.exit_code(), 2);
  // One host, or hosts that agree: nothing to say.
  EXPECT_TRUE(analyze_lines("[pod/w-0/main] NCCL version 2.21.5\n[pod/w-1/main] NCCL version "
                            "2.21.5\n")
                  .findings.empty());
}

TEST(LogsPasted, RankLevelSplitIsNotRepeatedPerHost) {
  Report r =
      analyze_inputs({test::source_path("fixtures/logs/findings/nccl.version-mismatch.log")}, {})
          .value();
  EXPECT_EQ(r.find("nccl.host-mismatch"), nullptr);
  EXPECT_NE(r.find("nccl.version-mismatch"), nullptr);
}

TEST(LogsNotALog, EachKindHasItsReason) {
  auto one = [](const std::string& name) {
    auto r = analyze_inputs({test::source_path("fixtures/logs/pasted/not-logs/" + name)}, {});
    EXPECT_TRUE(r.ok());
    return r.ok() ? std::move(*r) : Report{};
  };
  Report empty = one("empty.log");
  ASSERT_EQ(empty.not_logs.size(), 1u);
  EXPECT_EQ(empty.not_logs[0].kind, NotLog::empty);
  EXPECT_NE(empty.not_logs[0].reason.find("empty file"), std::string::npos);
  EXPECT_EQ(empty.exit_code(), 64);
  Report binary = one("core.rank0.log");
  ASSERT_EQ(binary.not_logs.size(), 1u);
  EXPECT_EQ(binary.not_logs[0].kind, NotLog::binary);
  EXPECT_NE(binary.not_logs[0].reason.find("binary data, not a log"), std::string::npos);
  EXPECT_EQ(binary.exit_code(), 64);
  Report text = one("no-nccl.log");
  ASSERT_EQ(text.not_logs.size(), 1u);
  EXPECT_EQ(text.not_logs[0].kind, NotLog::no_log_lines);
  EXPECT_NE(text.not_logs[0].reason.find("no NCCL/NVSHMEM/DeepEP line found in"),
            std::string::npos);
  EXPECT_EQ(text.exit_code(), 64);
  // Blank lines only count as empty; a NUL-padded tail after real lines is still a log.
  EXPECT_EQ(analyze_lines("\n  \n\n").not_logs.at(0).kind, NotLog::empty);
  Report padded =
      analyze_lines(std::string("h:1:1 [0] NCCL INFO Using network IB\n") + std::string(20, '\0'));
  EXPECT_TRUE(padded.not_logs.empty());
  EXPECT_EQ(padded.exit_code(), 0);
}

TEST(LogsNotALog, OneLogAmongOtherFilesIsAnalysed) {
  auto r = analyze_inputs({test::source_path("fixtures/logs/pasted/not-logs"),
                           test::source_path("fixtures/logs/findings/nccl.net-plugin.log")},
                          {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->not_logs.size(), 3u);
  EXPECT_FALSE(r->no_log_at_all());
  EXPECT_EQ(r->exit_code(), 2);
}

}  // namespace
}  // namespace epkit::logs

namespace epkit::cli {
namespace {

test::CliRun run_logs(std::vector<std::string> args) {
  args.insert(args.begin(), "logs");
  return test::run_epkit(std::move(args));
}

TEST(LogsCommandPasted, NotALogExits64WithTheReason) {
  std::string dir = test::source_path("fixtures/logs/pasted/not-logs/");
  test::CliRun empty = run_logs({dir + "empty.log"});
  EXPECT_EQ(empty.code, 64);
  EXPECT_NE(empty.err.find("empty.log: empty file, no log in it"), std::string::npos) << empty.err;
  test::CliRun binary = run_logs({dir + "core.rank0.log"});
  EXPECT_EQ(binary.code, 64);
  EXPECT_NE(binary.err.find("binary data, not a log"), std::string::npos) << binary.err;
  test::CliRun text = run_logs({"--json", dir + "no-nccl.log"});
  EXPECT_EQ(text.code, 64);
  EXPECT_NE(text.err.find("no NCCL/NVSHMEM/DeepEP line found in"), std::string::npos);
  auto doc = nlohmann::json::parse(text.out);
  EXPECT_EQ(doc["exit_code"], 64);
  EXPECT_EQ(doc["no_log"], true);
  EXPECT_EQ(doc["not_logs"][0]["kind"], "no_log_lines");
}

TEST(LogsCommandPasted, UnknownRankInTextAndJson) {
  std::string path = test::source_path("fixtures/logs/pasted/chat-excerpt.log");
  test::CliRun text = run_logs({path});
  EXPECT_EQ(text.code, 2);
  EXPECT_NE(text.out.find("ranks ? (rank unknown: 2 lines without a rank prefix)"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("Lines without a rank"), std::string::npos) << text.out;
  test::CliRun json = run_logs({"--json", path});
  auto doc = nlohmann::json::parse(json.out);
  for (const auto& f : doc["findings"]) {
    if (f["id"] != "nccl.memlock") continue;
    EXPECT_EQ(f["unranked_lines"], 2);
    EXPECT_TRUE(f["evidence"][0]["rank"].is_null());
  }
  EXPECT_EQ(doc["unranked"]["nccl_version"], "2.21.5+cuda12.4");
}

TEST(LogsCommandPasted, HostComparisonNamesBothSides) {
  test::CliRun r = run_logs({test::source_path("fixtures/logs/pasted/two-host-plugin.log")});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("nccl.host-mismatch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hosts ib-node-11, ib-node-12"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace epkit::cli
