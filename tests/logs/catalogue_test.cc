// The catalogue (issue 28): every mined WARN/ERROR site of NCCL, NVSHMEM and
// DeepEP, filled with plausible values as its macro prints it, is recognised
// as its family; every family has a fixture from its sources' wording; and
// the coverage figure docs/logs.md states holds.
#include "logs/catalogue.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "analyze_text.h"
#include "logs/analyzer.h"
#include "logs/reader.h"
#include "support/paths.h"
#include "support/temp_tree.h"

namespace epkit::logs {
namespace {

using test_util::analyze_text;

std::string expected_id(std::size_t site) {
  int f = family_of_site(site);
  return f < 0 ? std::string() : std::string(family_spec(static_cast<std::size_t>(f)).id);
}

// One test per mined site.
class CatalogueSite : public ::testing::TestWithParam<std::size_t> {};

TEST_P(CatalogueSite, FilledWordingGivesItsFamily) {
  std::size_t i = GetParam();
  const Site& site = catalogue_sites()[i];
  if (!site_is_matchable(i)) GTEST_SKIP() << "too generic to recognise: " << site.format;
  std::string line = site_line(site);
  Report r = analyze_text(line + "\n");
  std::string id = expected_id(i);
  ASSERT_FALSE(id.empty()) << site.file << ": " << site.format;
  EXPECT_NE(r.find(id), nullptr) << site.file << " (" << site.first << "-" << site.last
                                 << "): " << line;
  EXPECT_EQ(r.find("nccl.warn"), nullptr) << line;
}

INSTANTIATE_TEST_SUITE_P(Mined, CatalogueSite,
                         ::testing::Range<std::size_t>(0, catalogue_sites().size()),
                         [](const ::testing::TestParamInfo<std::size_t>& param) {
                           return "site" + std::to_string(param.param);
                         });

struct Coverage {
  std::size_t sites = 0, matchable = 0, named = 0;
  std::size_t curated = 0;  // in a family that knows the wording (not only the subsystem)
};

std::map<Source, Coverage> coverage() {
  std::map<Source, Coverage> out;
  for (std::size_t i = 0; i < catalogue_sites().size(); ++i) {
    Coverage& c = out[catalogue_sites()[i].source];
    ++c.sites;
    if (!site_is_matchable(i)) continue;
    ++c.matchable;
    if (family_of_site(i) < 0) continue;
    ++c.named;
    if (!catalogue_families()[static_cast<std::size_t>(family_of_site(i))].keys.empty())
      ++c.curated;
  }
  return out;
}

// The figure docs/logs.md states: every recognisable wording of the mined
// NCCL and NVSHMEM versions maps to a named family (never "other warnings").
TEST(LogsCatalogue, CoverageOfTheMinedSites) {
  auto c = coverage();
  EXPECT_EQ(c[Source::nccl].named, c[Source::nccl].matchable);
  EXPECT_EQ(c[Source::nvshmem].named, c[Source::nvshmem].matchable);
  EXPECT_EQ(c[Source::deepep].named, c[Source::deepep].matchable);
  // The mined sizes, as docs/logs.md gives them (mine.py's output).
  EXPECT_EQ(c[Source::nccl].sites, 532u);
  EXPECT_EQ(c[Source::nvshmem].sites, 950u);
  EXPECT_EQ(c[Source::deepep].sites, 40u);
  // docs/logs.md's split between curated and subsystem families.
  EXPECT_EQ(c[Source::nccl].curated, 342u);
  EXPECT_EQ(c[Source::nvshmem].curated, 365u);
  EXPECT_EQ(c[Source::deepep].curated, 40u);
  for (auto [source, cov] : c) {
    std::printf("source %d: %zu sites, %zu recognisable, %zu in a named family\n",
                static_cast<int>(source), cov.sites, cov.matchable, cov.named);
  }
}

TEST(LogsCatalogue, FamiliesAreWellFormed) {
  std::set<std::string> ids;
  std::vector<std::size_t> used(catalogue_families().size(), 0);
  for (std::size_t i = 0; i < catalogue_sites().size(); ++i) {
    if (family_of_site(i) >= 0) ++used[static_cast<std::size_t>(family_of_site(i))];
  }
  for (std::size_t f = 0; f < catalogue_families().size(); ++f) {
    const Family& fam = catalogue_families()[f];
    const RuleSpec& spec = family_spec(f);
    EXPECT_TRUE(ids.insert(std::string(fam.id)).second) << "duplicate family " << fam.id;
    EXPECT_EQ(spec.id, fam.id);
    EXPECT_FALSE(spec.title.empty()) << fam.id;
    EXPECT_FALSE(spec.cause.empty()) << fam.id;
    EXPECT_FALSE(spec.fix.empty()) << fam.id;
    if (!fam.rule) {
      EXPECT_FALSE(fam.evidence.empty()) << fam.id;
    }
    // deepep.error names DeepEP's wrapped CUDA/NCCL exceptions, whose
    // reason is code rather than a mined wording.
    if (fam.id != "deepep.error") {
      EXPECT_GT(used[f], 0u) << fam.id << " claims no mined site";
    }
  }
}

// fixtures/logs/catalogue/<family>.log: the family's wordings, one line per
// site, as the sources print them. EPKIT_WRITE_CATALOGUE_FIXTURES=DIR writes
// them anew (after mine.py ran); the test checks each gives its family.
TEST(LogsCatalogue, EveryFamilyHasAFixtureFromItsWording) {
  std::map<std::string, std::string> text;
  for (std::size_t i = 0; i < catalogue_sites().size(); ++i) {
    if (!site_is_matchable(i) || family_of_site(i) < 0) continue;
    const Family& fam = catalogue_families()[static_cast<std::size_t>(family_of_site(i))];
    text[std::string(fam.id)] += site_line(catalogue_sites()[i]) + "\n";
  }
  if (const char* dir = std::getenv("EPKIT_WRITE_CATALOGUE_FIXTURES")) {
    for (const auto& [id, body] : text) std::ofstream(std::string(dir) + "/" + id + ".log") << body;
  }
  std::string root = test::source_path("fixtures/logs/catalogue/");
  for (const auto& [id, body] : text) {
    std::string path = root + id + ".log";
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    auto r = analyze_inputs({path}, {});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_NE(r->find(id), nullptr) << path;
    EXPECT_EQ(r->find("nccl.warn"), nullptr) << path;
  }
}

TEST(LogsCatalogue, NamedFamiliesNotOtherWarnings) {
  // The held-out shapes issue 28 names: each gets its family.
  struct Case {
    const char* line;
    const char* id;
  };
  const Case cases[] = {
      {"node7:1:2 [3] NCCL WARN NET/IB : mlx5_3:1 Got async event : port error",
       "nccl.ib-async-event"},
      {"node7:1:2 [3] NCCL WARN NET/IB : mlx5_3:1 async fatal event: local catastrophic error",
       "nccl.ib-async-event"},
      {"node7:1:2 [3] NCCL WARN Failed to bind NVLink SHARP (NVLS) Multicast memory of size "
       "1073741824 : CUDA error 999 'unknown error'.",
       "nccl.nvls"},
      {"/build/nvshmem/src/host/init/init.cu:1010: non-zero status: 7 building transport map "
       "failed",
       "nvshmem.transport-map"},
      {"/build/nvshmem/src/modules/transport/ibrc/ibrc.cpp:nvshmemt_init:1662: neither "
       "nv_peer_mem, or nvidia_peermem detected. Skipping transport.",
       "nvshmem.peer-memory"},
      {"DeepEP dispatch RDMA sender timeout, channel: 3, RDMA: 1, nvl: 2, dst RDMA lane: 0, head: "
       "12, tail: 40",
       "deepep.timeout"},
      {"RuntimeError: Failed: Assertion error /workspace/DeepEP/csrc/deep_ep.cpp:112 "
       "'num_rdma_bytes % NUM_BUFFER_ALIGNMENT_BYTES == 0'",
       "deepep.assert"},
      // NVSHMEM 3.0-3.2 (the release archive): a transport whose init failed
      // was dropped, which is not a transport-map failure by itself.
      {"WARN: init failed for remote transport: ibrc", "nvshmem.transport-init"},
      {"/opt/nvshmem/src/host/transport/transport.cpp:nvshmemi_transport_init:275: init failed "
       "for transport: IBGDA",
       "nvshmem.transport-init"},
      {"/opt/nvshmem/src/modules/bootstrap/uid/bootstrap_uid.cpp:bootstrap_net_recv:99: Message "
       "truncated : received 256 bytes instead of 4",
       "nvshmem.bootstrap-connect"},
      // DEVX objects are the NIC's, not host memory.
      {"/opt/nvshmem/src/modules/transport/ibdevx/ibdevx.cpp:370: NULL value cannot allocate "
       "mlx5dv_devx_uar",
       "nvshmem.devx"},
  };
  for (const auto& c : cases) {
    Report r = analyze_text(std::string(c.line) + "\n");
    EXPECT_NE(r.find(c.id), nullptr) << c.line;
    EXPECT_EQ(r.find("nccl.warn"), nullptr) << c.line;
  }
}

TEST(LogsCatalogue, NvshmemDebugLinesNameTheirRank) {
  Report r = analyze_text(
      "node4:5151:5190 [2] NVSHMEM INFO cudaDriverVersion 12080\n"
      "node4:5151:5190 [2] /opt/nvshmem/src/modules/transport/ibdevx/ibdevx.cpp:1466 NVSHMEM "
      "WARN device mlx5_bond_0 is not enumerated as an mlx5 device. Skipping...\n");
  ASSERT_EQ(r.ranks.size(), 1u);
  EXPECT_EQ(r.ranks[0].label, "node4:5151");
  EXPECT_EQ(r.ranks[0].cuda_dev, 2);
  const Finding* f = r.find("nvshmem.hca-skipped");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->ranks, std::vector<std::string>{"node4:5151"});
}

TEST(LogsCatalogue, NvshmemPeNumbersNameTheRank) {
  // NVSHMEMI_ERROR_PRINT("[%d] rma not supported on transport to pe: %d", ...)
  Report r = analyze_text(
      "/opt/nvshmem/src/host/comm/putget.cpp:nvshmemi_proxy_rma_nbi:488: [3] rma not supported on "
      "transport to pe: 11\n"
      "/opt/nvshmem/src/host/comm/putget.cpp:nvshmemi_proxy_rma_nbi:488: [5] rma not supported on "
      "transport to pe: 11\n");
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_EQ(r.ranks[0].label, "rank 3");
  EXPECT_EQ(r.ranks[1].label, "rank 5");
  const Finding* f = r.find("nvshmem.transport-map");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->rank_count, 2u);
}

// Ranks sharing stderr split NVSHMEM's "FILE:LINE: non-zero status: N " from
// its message; once a file shows NVSHMEM output, bare lines that start with
// an NVSHMEM wording count, and other bare text does not.
TEST(LogsCatalogue, NvshmemMessagesSplitFromTheirPrefix) {
  auto r = analyze_inputs({test::source_path("fixtures/logs/cases/nvshmem-split-stderr")}, {});
  ASSERT_TRUE(r.ok());
  const Finding* t = r->find("nvshmem.transport");
  ASSERT_NE(t, nullptr);
  bool bare = false;
  for (const auto& d : t->details) bare = bare || d == "connect EPS failed";
  EXPECT_TRUE(bare);
  const Finding* qp = r->find("nvshmem.qp-transition");
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(qp->count, 3u);  // ibv_modify_qp with its prefix and alone, "Unable to create ah."
  EXPECT_NE(r->find("nvshmem.init"), nullptr);
  // Without NVSHMEM output before it, the same bare line is the application's.
  Report plain = analyze_text("connect EPS failed\nUnable to create ah.\n");
  EXPECT_TRUE(plain.findings.empty());
}

// Cross-rank rules for NVSHMEM and DeepEP, as for NCCL.
TEST(LogsCatalogue, TransportOneRankSkippedAndAnotherUsed) {
  auto r =
      analyze_inputs({test::source_path("fixtures/logs/findings/nvshmem.transport-split.log")}, {});
  ASSERT_TRUE(r.ok());
  const Finding* f = r->find("nvshmem.transport-split");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->spec->severity, Severity::error);
  ASSERT_GE(f->details.size(), 3u);
  EXPECT_EQ(f->details[0], "skipped by 1 rank: node1:4101");
  EXPECT_EQ(f->details[1], "not skipped by 1 rank: node2:5202");
  EXPECT_NE(f->details[2].find("nvidia_peermem"), std::string::npos);
  EXPECT_EQ(r->find("nvshmem.peer-memory"), nullptr);  // folded into the split
  // Every rank skipping it is no split: the peer-memory finding stands.
  Report alone = analyze_text(
      "[rank0]:/opt/nvshmem/src/modules/transport/ibrc/ibrc.cpp:nvshmemt_init:1662: neither "
      "nv_peer_mem, or nvidia_peermem detected. Skipping transport.\n");
  EXPECT_NE(alone.find("nvshmem.peer-memory"), nullptr);
  EXPECT_EQ(alone.find("nvshmem.transport-split"), nullptr);
}

TEST(LogsCatalogue, DeepEpTimeoutsNameThePeersThatNeverAnswered) {
  auto r = analyze_inputs({test::source_path("fixtures/logs/cases/deepep-ll-timeout")}, {});
  ASSERT_TRUE(r.ok());
  const Finding* f = r->find("deepep.timeout");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->rank_count, 3u);  // ranks 0, 1, 2 from the messages
  bool silent = false, also = false;
  for (const auto& d : f->details) {
    silent = silent || d == "waited on, with no timeout of their own (look there first): rank 3 "
                            "(3 waits)";
    also = also || d == "waited on, timed out too: rank 2 (1 wait)";
  }
  EXPECT_TRUE(silent);
  EXPECT_TRUE(also);
  ASSERT_EQ(r->ranks.size(), 3u);
  EXPECT_EQ(r->ranks[0].label, "rank 0");
}

}  // namespace
}  // namespace epkit::logs
