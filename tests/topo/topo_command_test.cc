#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "cli/command.h"
#include "support/cli_run.h"
#include "support/paths.h"
#include "support/temp_tree.h"
#include "topo/snapshot_json.h"

namespace epkit::cli {
namespace {

using test::CliRun;

CliRun run(std::vector<std::string> args) {
  return test::run_epkit(std::move(args));
}

TEST(TopoCommand, GkeA4TextHasEverySection) {
  auto r = run({"topo", "--sysroot", test::source_path("examples/gke-a4")});
  EXPECT_EQ(r.code, k_exit_ok) << r.err;
  for (const char* part :
       {"GPUs (8)", "GPU0   0000:13:00.0  NVIDIA B200", "RDMA NICs (8)", "RoCE v2 IPv4 GID index 3",
        "Other network interfaces (3)", "PCIe switches (4)",
        "GPUs: GPU0,GPU1    NICs: mlx5_0,mlx5_1", "Topology matrix", "NIC0: mlx5_0", "Legend:",
        "export DEEP_EP_DEVICE_TO_HCA_MAPPING=0:mlx5_0:1,1:mlx5_1:1,2:mlx5_2:1,3:mlx5_3:1,"
        "4:mlx5_4:1,5:mlx5_5:1,6:mlx5_6:1,7:mlx5_7:1",
        "export NCCL_IB_HCA='=mlx5_0:1,", "GPU3=mlx5_3:1"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  }
  EXPECT_EQ(r.out.find("Probe notes"), std::string::npos);
}

TEST(TopoCommand, DgxShowsNvswitchesAndBond) {
  auto r = run({"topo", "--sysroot", test::source_path("examples/dgx-h100")});
  EXPECT_EQ(r.code, k_exit_ok);
  EXPECT_NE(r.out.find("NVSwitches (4)"), std::string::npos);
  EXPECT_NE(r.out.find("mlx5_bond_0"), std::string::npos);
  EXPECT_NE(r.out.find("(bond)"), std::string::npos);
}

TEST(TopoCommand, JsonRoundTripsAndCarriesMapping) {
  auto r = run({"topo", "--json", "--sysroot", test::source_path("examples/gke-a4")});
  ASSERT_EQ(r.code, k_exit_ok) << r.err;
  auto j = nlohmann::json::parse(r.out);
  auto snap = topo::from_json(j["snapshot"]);
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  EXPECT_EQ(snap->gpus.size(), 8u);
  EXPECT_EQ(j["assignment"]["per_gpu"][7]["nic"], "mlx5_7");
  EXPECT_EQ(j["matrix"]["columns"][8], "NIC0");
}

TEST(TopoCommand, NoGpuSaysSoAndExitsZero) {
  test::TempTree tree;
  tree.mkdir("/sys/bus/pci/devices");
  tree.mkdir("/sys/class/net");
  auto r = run({"topo", "--sysroot", tree.root()});
  EXPECT_EQ(r.code, k_exit_ok);
  EXPECT_NE(r.out.find("No NVIDIA GPU"), std::string::npos);
  EXPECT_EQ(r.out.find("Topology matrix"), std::string::npos);
}

TEST(TopoCommand, NotesShownAtTheEnd) {
  test::TempTree tree;
  auto r = run({"topo", "--sysroot", tree.root()});
  EXPECT_EQ(r.code, k_exit_ok);
  auto notes = r.out.find("Probe notes");
  ASSERT_NE(notes, std::string::npos);
  EXPECT_NE(r.out.find("/sys/bus/pci/devices", notes), std::string::npos);
}

TEST(TopoCommand, BadSysrootIsUsageError) {
  auto r = run({"topo", "--sysroot", "/nonexistent/tree"});
  EXPECT_EQ(r.code, k_exit_usage);
  EXPECT_NE(r.err.find("epkit topo"), std::string::npos);
}

}  // namespace
}  // namespace epkit::cli
