#include "logs/analyzer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <string_view>

#include "analyze_text.h"
#include "logs/reader.h"
#include "support/paths.h"
#include "support/temp_tree.h"

namespace epkit::logs {
namespace {

using test_util::analyze_text;

Report analyze_path(const std::string& relative) {
  auto report = analyze_inputs({test::source_path(relative)}, {});
  EXPECT_TRUE(report.ok()) << report.error().message;
  return report.ok() ? std::move(*report) : Report{};
}

std::set<std::string> ids(const Report& r) {
  std::set<std::string> out;
  for (const auto& f : r.findings) out.insert(std::string(f.spec->id));
  return out;
}

// fixtures/logs/findings/<id>[@variant].log: each gives exactly its finding.
TEST(LogsFindings, EachFixtureGivesExactlyItsFinding) {
  std::set<std::string> covered;
  for (const auto& entry :
       std::filesystem::directory_iterator(test::source_path("fixtures/logs/findings"))) {
    std::string name = entry.path().filename().string();
    std::string id = name.substr(0, name.find_first_of("@"));
    if (id.ends_with(".log")) id.resize(id.size() - 4);
    Report r = analyze_path("fixtures/logs/findings/" + name);
    EXPECT_EQ(ids(r), std::set<std::string>{id}) << name;
    const Finding* f = r.find(id);
    ASSERT_NE(f, nullptr) << name;
    ASSERT_FALSE(f->evidence.empty()) << name;
    EXPECT_TRUE(f->evidence[0].file.ends_with(name)) << f->evidence[0].file;
    EXPECT_GE(f->evidence[0].line, 1u);
    EXPECT_FALSE(f->evidence[0].text.empty());
    covered.insert(id);
  }
  // Every id in the table has a fixture.
  for (const auto& spec : rule_table()) EXPECT_TRUE(covered.count(std::string(spec.id))) << spec.id;
}

TEST(LogsFindings, IssueIdsExist) {
  std::set<std::string> table;
  for (const auto& spec : rule_table()) table.insert(std::string(spec.id));
  for (const char* id :
       {"nccl.socket-fallback", "nccl.bad-interface", "nccl.bond-in-hca", "nccl.gdr-disabled",
        "nccl.acs", "nccl.roce-unreachable", "nccl.shm", "nccl.memlock", "nccl.net-plugin",
        "nccl.version-mismatch", "nccl.net-mismatch", "nccl.init-incomplete",
        "nccl.gib-nonblocking", "rdma.provider-abi", "nvshmem.ibgda-mapping", "deepep.timeout",
        "torch.watchdog-timeout"}) {
    EXPECT_TRUE(table.count(id)) << id;
  }
}

TEST(LogsFindings, DoctorChecksNamedWhereTheCauseIsShared) {
  auto doctor = [](Rule r) { return std::string(spec_of(r).doctor_check); };
  EXPECT_EQ(doctor(Rule::bad_interface), "nccl.ifname");
  EXPECT_EQ(doctor(Rule::bond_in_hca), "nccl.ifname");
  EXPECT_EQ(doctor(Rule::gdr_no_peer_memory), "rdma.gpudirect");
  EXPECT_EQ(doctor(Rule::gdr_distance), "");  // policy, not a node fault
  EXPECT_EQ(doctor(Rule::shm), "container.limits");
  EXPECT_EQ(doctor(Rule::memlock), "container.limits");
  EXPECT_EQ(doctor(Rule::net_plugin), "nccl.net-plugin");
  EXPECT_EQ(doctor(Rule::gib_nonblocking), "nccl.net-plugin");
  EXPECT_EQ(doctor(Rule::provider_abi), "rdma.provider-abi");
  EXPECT_EQ(doctor(Rule::ibgda_mapping), "nvshmem.ibgda");
  EXPECT_EQ(doctor(Rule::roce_unreachable), "rdma.gid-index");
  for (std::size_t i = 0; i < rule_table().size(); ++i) {
    EXPECT_EQ(static_cast<std::size_t>(rule_table()[i].rule), i) << "table order must follow Rule";
  }
}

TEST(LogsCleanLog, EightRanksNoFinding) {
  Report r = analyze_path("fixtures/logs/clean");
  EXPECT_TRUE(r.findings.empty()) << *ids(r).begin();
  EXPECT_EQ(r.exit_code(), 0);
  ASSERT_EQ(r.ranks.size(), 8u);
  for (const auto& rank : r.ranks) {
    EXPECT_EQ(rank.nccl_version, "2.28.9+cuda13.0");
    EXPECT_EQ(rank.network, "IB");
    EXPECT_EQ(rank.net_devices, (std::vector<std::string>{"mlx5_0:1/RoCE", "mlx5_1:1/RoCE"}));
    ASSERT_EQ(rank.oob.size(), 1u);
    EXPECT_EQ(rank.oob[0].name, "eth0");
    ASSERT_EQ(rank.bootstrap.size(), 1u);
    EXPECT_EQ(rank.gdr_enabled.size(), 2u);
    EXPECT_GE(rank.cuda_dev, 0);
  }
  ASSERT_EQ(r.communicators.size(), 1u);
  EXPECT_EQ(r.communicators[0].complete_count, 8);
  EXPECT_EQ(r.communicators[0].nranks, 8);
  // The benign lines are in the clean log: they must stay silent.
  EXPECT_EQ(r.ranks[0].transports.size(), 2u);
}

TEST(LogsSeeds, GkeA4DeepEpIncident) {
  Report r = analyze_path("fixtures/logs/seed/gke-a4-deepep.log");
  EXPECT_EQ(ids(r), (std::set<std::string>{"rdma.provider-abi", "nccl.net-plugin",
                                           "nccl.gib-nonblocking"}));
  EXPECT_EQ(r.exit_code(), 2);
  const Finding* plugin = r.find("nccl.net-plugin");
  ASSERT_NE(plugin, nullptr);
  EXPECT_EQ(plugin->rank_count, 2u);  // srun tasks 0 and 1
}

TEST(LogsSeeds, MlEngineeringNetLines) {
  Report r = analyze_path("fixtures/logs/seed/ml-engineering-net-lines.log");
  const Finding* bond = r.find("nccl.bond-in-hca");
  ASSERT_NE(bond, nullptr);
  EXPECT_EQ(bond->details, std::vector<std::string>{"mlx5_bond_0:1/RoCE"});
  EXPECT_EQ(bond->rank_count, 1u);
  EXPECT_EQ(r.find("nccl.bad-interface"), nullptr);  // eth0 on 10.0.0.23 is routable
  ASSERT_EQ(r.ranks.size(), 4u);
  EXPECT_EQ(r.ranks[0].net_name, "FastSocket");
  EXPECT_EQ(r.ranks[0].net_devices.size(), 8u);
}

constexpr std::string_view k_a = "node1:11:12 [0] NCCL ";

std::string line(std::string_view rest) {
  return std::string(k_a) + std::string(rest) + "\n";
}

TEST(LogsRules, SocketFallbackOnlyForSocket) {
  EXPECT_TRUE(ids(analyze_text(line("INFO Using network IB"))).empty());
  EXPECT_TRUE(ids(analyze_text(line("INFO Using network gIB"))).empty());
  Report one_host = analyze_text(line("INFO Using network Socket"));
  EXPECT_EQ(ids(one_host), std::set<std::string>{"nccl.socket-fallback"});
  EXPECT_EQ(one_host.find("nccl.socket-fallback")->spec->rule, Rule::socket_single_host);
  EXPECT_EQ(one_host.exit_code(), 0);
  Report two_hosts = analyze_text(line("INFO Using network Socket") +
                                  "node2:5:5 [0] NCCL INFO Using network Socket\n");
  EXPECT_EQ(two_hosts.find("nccl.socket-fallback")->spec->rule, Rule::socket_fallback);
  EXPECT_EQ(two_hosts.exit_code(), 1);
}

TEST(LogsRules, BadInterfaces) {
  auto bad = [](std::string_view l) {
    return analyze_text(line(l)).find("nccl.bad-interface") != nullptr;
  };
  EXPECT_TRUE(bad("INFO NET/Socket : Using [0]lo:127.0.0.1<0>"));
  EXPECT_TRUE(bad("INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]veth12ab:10.1.0.1<0>"));
  EXPECT_TRUE(bad("INFO Bootstrap : Using docker0:172.17.0.1<0>"));
  EXPECT_TRUE(bad("INFO Bootstrap: Using eno1:169.254.0.3<0>"));
  EXPECT_TRUE(bad("INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB virbr0:192.168.122.1<0>"));
  EXPECT_FALSE(bad("INFO NET/Socket : Using [0]eth0:10.0.0.1<0>"));
  EXPECT_FALSE(bad("INFO Bootstrap: Using ens8f0:10.2.0.1<0>"));
  EXPECT_FALSE(bad("INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.0.0.1<0>"));
  Report r = analyze_text(line("INFO Bootstrap : Using docker0:172.17.0.1<0>"));
  EXPECT_EQ(r.find("nccl.bad-interface")->details,
            std::vector<std::string>{"bootstrap on docker0 172.17.0.1"});
}

TEST(LogsRules, BondOnlyAmongRails) {
  EXPECT_EQ(analyze_text(line("INFO NET/IB : Using [0]mlx5_bond_0:1/RoCE [1]mlx5_bond_1:1/RoCE ; "
                              "OOB bond0:10.0.0.1<0>"))
                .find("nccl.bond-in-hca"),
            nullptr);
  EXPECT_NE(
      analyze_text(
          line("INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_bond_0:1/RoCE ; OOB eth0:10.0.0.1<0>"))
          .find("nccl.bond-in-hca"),
      nullptr);
}

TEST(LogsRules, GdrPeerMemoryAndDistanceToldApart) {
  Report missing = analyze_text(line("INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'"));
  ASSERT_NE(missing.find("nccl.gdr-disabled"), nullptr);
  EXPECT_EQ(missing.find("nccl.gdr-disabled")->spec->rule, Rule::gdr_no_peer_memory);
  EXPECT_EQ(missing.exit_code(), 1);
  EXPECT_EQ(missing.ranks[0].gdr_disabled, std::vector<std::string>{"mlx5_0"});
  Report policy =
      analyze_text(line("TRACE GPU Direct RDMA Disabled for GPU ca000 / HCA 0 (distance 7 > 4)"));
  ASSERT_NE(policy.find("nccl.gdr-disabled"), nullptr);
  EXPECT_EQ(policy.find("nccl.gdr-disabled")->spec->rule, Rule::gdr_distance);
  EXPECT_EQ(policy.exit_code(), 0);
  EXPECT_TRUE(
      ids(analyze_text(line("INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'"))).empty());
}

TEST(LogsRules, CompletionErrorsByStatus) {
  auto one = [](std::string_view l) {
    auto s = ids(analyze_text(line(l)));
    return s.empty() ? std::string() : *s.begin();
  };
  EXPECT_EQ(one("WARN NET/IB : Got completion from peer 10.0.0.2<1> with error 4, opcode 0, len 0, "
                "vendor err 81 (Recv)"),
            "nccl.acs");
  EXPECT_EQ(one("WARN NET/IB: Got completion from peer 10.0.0.2<1> with "
                "status=IBV_WC_LOC_PROT_ERR(4) opcode=IBV_WC_RECV(128) vendor_err=81 hca mlx5_0"),
            "nccl.acs");
  EXPECT_EQ(one("WARN NET/IB : Got completion from peer 10.0.0.2<1> with error 12, opcode 0, len "
                "0, vendor err 129 (Send)"),
            "nccl.roce-unreachable");
  EXPECT_EQ(one("WARN NET/IB: Got completion from peer 10.0.0.2<1> with status=12 opcode=0 len=0 "
                "vendor err 129 (Send)"),
            "nccl.roce-unreachable");
  // Status 5 (flush) follows an earlier error: not a cause of its own.
  EXPECT_EQ(one("WARN NET/IB : Got completion from peer 10.0.0.2<1> with error 5, opcode 0, len 0, "
                "vendor err 249 (Recv)"),
            "nccl.warn");
}

TEST(LogsRules, ShmMemlockPluginShim) {
  auto has = [](std::string_view l, const char* id) {
    return analyze_text(line(l)).find(id) != nullptr;
  };
  EXPECT_TRUE(has("WARN Error: failed to extend /dev/shm/nccl-abc to 9637892 bytes", "nccl.shm"));
  EXPECT_TRUE(has("WARN Error while creating shared memory segment /dev/shm/nccl-x (size 9637888)",
                  "nccl.shm"));
  EXPECT_FALSE(has("WARN Cuda failure 'out of memory'", "nccl.shm"));
  // Normal operation and retries mention /dev/shm too.
  EXPECT_TRUE(
      ids(analyze_text(line(
              "INFO MMAP allocated shareable host buffer /dev/shm/nccl-x size 9637888 ptr 0x1")))
          .empty());
  EXPECT_TRUE(ids(analyze_text(line("INFO fallocate: Failed to extend /dev/shm/nccl-x to 4 bytes, "
                                    "error: No space left on device (28) - retrying")))
                  .empty());
  EXPECT_FALSE(
      has("WARN unlink shared memory /dev/shm/nccl-x failed, error: No such file or directory (2)",
          "nccl.shm"));
  EXPECT_TRUE(
      has("WARN Call to ibv_reg_mr failed with error Cannot allocate memory", "nccl.memlock"));
  EXPECT_TRUE(
      has("WARN Call to ibv_create_cq failed with error Cannot allocate memory", "nccl.memlock"));
  EXPECT_FALSE(has("WARN Call to ibv_reg_mr failed with error Bad address", "nccl.memlock"));
  EXPECT_TRUE(has("WARN Failed to initialize any NET plugin", "nccl.net-plugin"));
  EXPECT_TRUE(
      has("WARN NCCL/NET (shim) mismatch recommended: TORCH_NCCL_USE_COMM_NONBLOCKING=0 (expected "
          "unset)",
          "nccl.gib-nonblocking"));
  EXPECT_FALSE(
      has("INFO NCCL_NET/gIB : TORCH_NCCL_USE_COMM_NONBLOCKING unset", "nccl.gib-nonblocking"));
}

TEST(LogsRules, BenignLinesAreNotFindings) {
  std::string text =
      line("INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.") +
      line("INFO NET/IB : dlvsym failed on mlx5dv_reg_dmabuf_mr, version MLX5_1.25") +
      line("WARN NET/IB : dlvsym failed on mlx5dv_query_device, version MLX5_1.0") +
      line("INFO ENV/Plugin: Could not find: libnccl-env.so.");
  EXPECT_TRUE(analyze_text(text).findings.empty());
}

// libibverbs tries every provider /etc/libibverbs.d lists: one that is not
// installed, for hardware of another kind, is noise on healthy nodes
// (NVIDIA/nccl#1044's answer). A missing provider of the NICs GPU clusters use,
// an ABI mismatch or a device without a provider is the finding.
TEST(LogsRules, MissingProvidersOfOtherHardwareAreNoise) {
  auto warning = [](std::string_view driver) {
    return fmt::format(
        "libibverbs: Warning: couldn't load driver 'lib{0}-rdmav34.so': lib{0}-rdmav34.so: cannot "
        "open shared object file: No such file or directory\n",
        driver);
  };
  for (std::string_view noise : {"ipathverbs", "vmw_pvrdma", "rxe", "siw", "mthca", "cxgb4"})
    EXPECT_TRUE(analyze_text(warning(noise)).findings.empty()) << noise;
  for (std::string_view nic : {"mlx5", "efa", "bnxt_re"})
    EXPECT_NE(analyze_text(warning(nic)).find("rdma.provider-abi"), nullptr) << nic;
  EXPECT_NE(analyze_text("libibverbs: Warning: no userspace device-specific driver found for "
                         "/sys/class/infiniband_verbs/uverbs0\n")
                .find("rdma.provider-abi"),
            nullptr);
}

TEST(LogsRules, VersionAndNetMismatchAcrossRanks) {
  std::string same =
      "a:1:1 [0] NCCL INFO NCCL version 2.28.9\nb:2:2 [0] NCCL INFO NCCL version 2.28.9\n";
  EXPECT_TRUE(analyze_text(same).findings.empty());
  Report r = analyze_text(same + "c:3:3 [0] NCCL INFO NCCL version 2.21.5\n");
  const Finding* f = r.find("nccl.version-mismatch");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->ranks, std::vector<std::string>{"c:3"});
  ASSERT_EQ(f->evidence.size(), 1u);
  EXPECT_EQ(f->evidence[0].line, 3u);

  std::string nets = "a:1:1 [0] NCCL INFO Using network IB\nb:2:2 [0] NCCL INFO Using network IB\n";
  EXPECT_TRUE(analyze_text(nets).findings.empty());
  EXPECT_NE(
      analyze_text(nets + "c:3:3 [0] NCCL INFO Using network gIB\n").find("nccl.net-mismatch"),
      nullptr);
}

TEST(LogsRules, InitIncompleteNamesRanksAndHosts) {
  auto init = [](std::string_view prefix, int rank, std::string_view what) {
    return std::string(prefix) + " NCCL INFO ncclCommInitRankConfig comm 0x1 rank " +
           std::to_string(rank) + " nranks 3 cudaDev 0 nvmlDev 0 busId 1000 commId 0xfeed - Init " +
           std::string(what) + "\n";
  };
  std::string text = init("h1:1:1 [0]", 0, "START") + init("h2:2:2 [0]", 1, "START") +
                     init("h1:1:1 [0]", 0, "COMPLETE");
  Report r = analyze_text(text);
  const Finding* f = r.find("nccl.init-incomplete");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(f->details.size(), 1u);
  EXPECT_EQ(
      f->details[0],
      "commId 0xfeed: 1 of 3 ranks reached Init COMPLETE; missing ranks 1 (h2:2), 2 (no log line)");
  EXPECT_EQ(f->ranks, std::vector<std::string>{"h2:2"});
  ASSERT_FALSE(f->evidence.empty());
  EXPECT_EQ(f->evidence[0].line, 2u);  // rank 1's Init START
  EXPECT_EQ(f->spec->rule, Rule::init_incomplete);
  EXPECT_EQ(r.exit_code(), 2);
  // Only rank 2 left, and it never logged anything: a missing file, not a hang.
  Report unseen = analyze_text(text + init("h2:2:2 [0]", 1, "COMPLETE"));
  ASSERT_NE(unseen.find("nccl.init-incomplete"), nullptr);
  EXPECT_EQ(unseen.find("nccl.init-incomplete")->spec->rule, Rule::init_unseen);
  EXPECT_EQ(unseen.exit_code(), 0);
  text += init("h2:2:2 [0]", 1, "COMPLETE") + init("h3:3:3 [0]", 2, "COMPLETE");
  EXPECT_TRUE(analyze_text(text).findings.empty());
}

TEST(LogsRules, WatchdogAndDeepEp) {
  Report r = analyze_text(
      "[rank3]:[E1121 05:02:11 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective "
      "operation timeout: "
      "WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
      "600012 ms\n"
      "[rank1]:DeepEP timeout for combine receivers, rank 1, responsible_channel = 0, tokens "
      "remained: 3\n");
  ASSERT_NE(r.find("torch.watchdog-timeout"), nullptr);
  EXPECT_EQ(r.find("torch.watchdog-timeout")->details,
            std::vector<std::string>{"SeqNum=42 OpType=ALLREDUCE"});
  EXPECT_EQ(r.find("torch.watchdog-timeout")->ranks, std::vector<std::string>{"rank 3"});
  ASSERT_NE(r.find("deepep.timeout"), nullptr);
  EXPECT_TRUE(analyze_text("[rank1]:DeepEP buffer ready, timeout 100 s\n").findings.empty());
}

TEST(LogsFacts, InterleavedTorchrunRanksAreSeparated) {
  std::string text =
      "[rank0]:node1:100:101 [0] NCCL INFO NCCL version 2.28.9\n"
      "[rank1]:node1:200:201 [1] NCCL INFO NCCL version 2.28.9\n"
      "[rank0]:node1:100:102 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1 "
      "datatype 7\n"
      "[rank1]:node1:200:202 [1] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1 "
      "datatype 7\n"
      "[rank1]:node1:200:202 [1] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 1 "
      "datatype 7\n"
      "[rank1]:plain application output\n";
  Report r = analyze_text(text);
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_EQ(r.ranks[0].label, "node1:100");
  EXPECT_EQ(r.ranks[0].launcher_rank, 0);
  EXPECT_EQ(r.ranks[1].cuda_dev, 1);
  ASSERT_EQ(r.ranks[1].collectives.size(), 1u);
  EXPECT_EQ(r.ranks[1].collectives[0].count, 2u);
  EXPECT_EQ(r.ranks[1].lines, 4u);  // the plain line joins rank 1 through its launcher prefix
  EXPECT_EQ(r.ranks[0].collectives[0].count, 1u);
}

TEST(LogsFacts, SlicesCountCollectivesBetweenMarkers) {
  std::string coll = line("INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1");
  std::string ag = line("INFO AllGather: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1");
  std::string text = coll + "iteration: 1\n" + coll + coll + ag + "iteration: 2\n" + coll;
  Report r = analyze_text(text, Options{"iteration: "});
  ASSERT_EQ(r.slices.size(), 3u);
  EXPECT_EQ(r.slices[0].collectives[0].count, 1u);
  EXPECT_EQ(r.slices[1].marker, "iteration: 1");
  ASSERT_EQ(r.slices[1].collectives.size(), 2u);
  EXPECT_EQ(r.slices[1].collectives[0].count, 2u);
  EXPECT_EQ(r.slices[2].collectives[0].count, 1u);
  EXPECT_FALSE(Analyzer::create(Options{"(unclosed"}).ok());
}

TEST(LogsMemory, BoundedByRanksNotLines) {
  // 200k lines from 4 ranks: 4 rank records, collectives counted, nothing kept per line.
  std::string text;
  for (int i = 0; i < 50000; ++i) {
    for (int r = 0; r < 4; ++r) {
      // 'n' appended on its own: GCC 12 at -O3 wrongly reports an overlapping
      // memcpy in "literal" + std::string (-Wrestrict, GCC PR 105329).
      text += 'n';
      text += std::to_string(r) + ":1:1 [0] NCCL INFO AllReduce: opCount " + std::to_string(i) +
              " sendbuff 0x1 recvbuff 0x1 count 1\n";
    }
  }
  text += line("WARN Cuda failure 'x'");
  for (int i = 0; i < 1000; ++i) text += line("WARN Failed to initialize any NET plugin");
  Report r = analyze_text(text);
  ASSERT_EQ(r.ranks.size(), 5u);
  EXPECT_EQ(r.ranks[0].collectives[0].count, 50000u);
  const Finding* f = r.find("nccl.net-plugin");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->count, 1000u);
  EXPECT_EQ(f->evidence.size(), k_max_evidence);
}

TEST(LogsMemory, InvalidUtf8AndHugeLinesStayPrintable) {
  std::string text = std::string(k_a) + "WARN Failed to initialize any NET plugin \xFF\xFE " +
                     std::string(10000, 'z') + "\n";
  Report r = analyze_text(text);
  const Finding* f = r.find("nccl.net-plugin");
  ASSERT_NE(f, nullptr);
  EXPECT_LT(f->evidence[0].text.size(), 300u);
  EXPECT_NE(f->evidence[0].text.find("\xEF\xBF\xBD"), std::string::npos);
}

}  // namespace
}  // namespace epkit::logs

namespace epkit::logs {
namespace {

// A real log: 4 ranks on one 4xH200 node (no RDMA), NCCL 2.28.9 through
// PyTorch, NCCL_DEBUG_SUBSYS=INIT,NET,COLL (scripts/device/nccl_log_sample.py).
// NET/Socket's "GPU Direct RDMA Disabled" line there is a fact, not a finding.
TEST(LogsRealLog, SingleNodeH200x4HasOnlyTheSocketNote) {
  auto report =
      analyze_inputs({test::source_path("fixtures/logs/real/h200x4-single-node.log.gz")}, {});
  ASSERT_TRUE(report.ok()) << report.error().message;
  std::set<std::string> found;
  for (const auto& f : report->findings) found.insert(std::string(f.spec->id));
  EXPECT_EQ(found, (std::set<std::string>{"nccl.socket-fallback"}));
  EXPECT_EQ(report->exit_code(), 0);
  ASSERT_EQ(report->ranks.size(), 4u);
  for (const auto& rank : report->ranks) {
    EXPECT_EQ(rank.nccl_version, "2.28.9+cuda13.0");
    EXPECT_EQ(rank.network, "Socket");
    EXPECT_EQ(rank.gdr_disabled, std::vector<std::string>{"eth0"});
  }
  ASSERT_EQ(report->communicators.size(), 1u);
  EXPECT_EQ(report->communicators[0].complete_count, 4);
}

}  // namespace
}  // namespace epkit::logs
