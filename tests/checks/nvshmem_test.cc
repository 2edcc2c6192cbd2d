#include <gtest/gtest.h>

#include "checks/check_fixture.h"

namespace epkit::checks {
namespace {

using test::describe;
using test::make_snapshot;
using test::mentions;
using test::run_check;
using test::TempTree;

constexpr const char* k_params_off =
    "ResmanDebugLevel: 4294967295\nEnableStreamMemOPs: 0\nRegistryDwords: \"\"\n";
constexpr const char* k_params_on =
    "EnableStreamMemOPs: 1\nRegistryDwords: \"RmFoo=0x3;PeerMappingOverride=1;\"\n";
constexpr const char* k_gdrdrv =
    "gdrdrv 24576 0 - Live 0x0000000000000000 (OE)\n"
    "nvidia 14376960 100 nvidia_uvm, Live 0x0000000000000000 (POE)\n";

const topo::Snapshot k_rdma = make_snapshot(8, {"mlx5_0", "mlx5_1"});

void make_gcp(const TempTree& tree) {
  tree.write("/sys/class/dmi/id/sys_vendor", "Google\n");
  tree.write("/sys/class/dmi/id/product_name", "Google Compute Engine\n");
}

TEST(NvshmemIbgda, NothingConfiguredSkips) {
  TempTree tree;
  auto out = run_check("nvshmem.ibgda", tree, {{"NCCL_NET", "IB"}});
  EXPECT_EQ(out.status, Status::skip) << describe(out);
}

TEST(NvshmemIbgda, GpuHandlerNeedsPeerMappingOverride) {
  TempTree tree;
  tree.write("/proc/driver/nvidia/params", k_params_off);
  std::map<std::string, std::string> vars{{"NVSHMEM_IB_ENABLE_IBGDA", "1"},
                                          {"NVSHMEM_IBGDA_NIC_HANDLER", "gpu"}};
  auto out = run_check("nvshmem.ibgda", tree, vars);
  EXPECT_EQ(out.status, Status::fail) << describe(out);
  EXPECT_TRUE(mentions(out, "PeerMappingOverride=1")) << describe(out);
  tree.write("/proc/driver/nvidia/params", "RegistryDwords: \"PeerMappingOverride=0;\"\n");
  EXPECT_EQ(run_check("nvshmem.ibgda", tree, vars).status, Status::fail);
  tree.write("/proc/driver/nvidia/params", k_params_on);
  auto fixed = run_check("nvshmem.ibgda", tree, vars, k_rdma);
  EXPECT_EQ(fixed.status, Status::pass) << describe(fixed);
}

TEST(NvshmemIbgda, AutoHandlerWarnsButFailsOnGoogleCloud) {
  TempTree tree;
  tree.write("/proc/driver/nvidia/params", k_params_off);
  std::map<std::string, std::string> vars{{"NVSHMEM_IB_ENABLE_IBGDA", "true"}};
  EXPECT_EQ(run_check("nvshmem.ibgda", tree, vars).status, Status::warn);
  make_gcp(tree);
  auto gcp = run_check("nvshmem.ibgda", tree, vars);
  EXPECT_EQ(gcp.status, Status::fail) << describe(gcp);
}

TEST(NvshmemIbgda, PerDeviceRegistryLineIsNotTheGlobalOne) {
  TempTree tree;
  // As on a lent H200 node: both lines present, both empty.
  tree.write("/proc/driver/nvidia/params",
             "EnableStreamMemOPs: 0\nRegistryDwords: \"\"\nRegistryDwordsPerDevice: \"\"\n");
  std::map<std::string, std::string> vars{{"NVSHMEM_IB_ENABLE_IBGDA", "1"},
                                          {"NVSHMEM_IBGDA_NIC_HANDLER", "gpu"}};
  EXPECT_EQ(run_check("nvshmem.ibgda", tree, vars, k_rdma).status, Status::fail);
  tree.write("/proc/driver/nvidia/params",
             "RegistryDwordsPerDevice: \"\"\nRegistryDwords: \"PeerMappingOverride=1;\"\n");
  EXPECT_EQ(run_check("nvshmem.ibgda", tree, vars, k_rdma).status, Status::pass);
}

TEST(NvshmemIbgda, CpuHandlerOnGoogleCloudFails) {
  TempTree tree;
  tree.write("/proc/modules", k_gdrdrv);
  std::map<std::string, std::string> vars{{"NVSHMEM_IB_ENABLE_IBGDA", "1"},
                                          {"NVSHMEM_IBGDA_NIC_HANDLER", "cpu"}};
  auto elsewhere = run_check("nvshmem.ibgda", tree, vars, k_rdma);
  EXPECT_EQ(elsewhere.status, Status::pass) << describe(elsewhere);
  make_gcp(tree);
  auto gcp = run_check("nvshmem.ibgda", tree, vars, k_rdma);
  EXPECT_EQ(gcp.status, Status::fail) << describe(gcp);
  EXPECT_EQ(gcp.fix, "export NVSHMEM_IBGDA_NIC_HANDLER=gpu");
}

TEST(NvshmemIbgda, CpuHandlerNeedsGdrdrv) {
  TempTree tree;
  tree.write("/proc/modules", "nvidia 14376960 100 - Live 0x0 (POE)\n");
  auto out = run_check("nvshmem.ibgda", tree,
                       {{"NVSHMEM_IB_ENABLE_IBGDA", "1"}, {"NVSHMEM_IBGDA_NIC_HANDLER", " CPU"}});
  EXPECT_EQ(out.status, Status::fail) << describe(out);
  EXPECT_TRUE(mentions(out, "gdrdrv"));
}

TEST(NvshmemIbgda, UseGdrcopyNeedsGdrdrv) {
  TempTree tree;
  tree.write("/proc/modules", "nvidia 14376960 100 - Live 0x0 (POE)\n");
  std::map<std::string, std::string> vars{{"NVSHMEM_USE_GDRCOPY", "1"}};
  auto out = run_check("nvshmem.ibgda", tree, vars);
  EXPECT_EQ(out.status, Status::fail) << describe(out);
  tree.write("/proc/modules", k_gdrdrv);
  EXPECT_EQ(run_check("nvshmem.ibgda", tree, vars).status, Status::pass);
  tree.remove("/proc/modules");
  tree.mkdir("/sys/module/gdrdrv");  // built in: visible only under /sys/module
  EXPECT_EQ(run_check("nvshmem.ibgda", tree, vars).status, Status::pass);
}

TEST(NvshmemIbgda, RemoteTransportIbgdaAloneFails) {
  TempTree tree;
  tree.write("/proc/driver/nvidia/params", k_params_on);
  auto out = run_check("nvshmem.ibgda", tree, {{"NVSHMEM_REMOTE_TRANSPORT", "ibgda"}}, k_rdma);
  EXPECT_EQ(out.status, Status::fail) << describe(out);
  EXPECT_EQ(out.fix, "export NVSHMEM_IB_ENABLE_IBGDA=1");
  auto both = run_check("nvshmem.ibgda", tree,
                        {{"NVSHMEM_REMOTE_TRANSPORT", "ibgda"},
                         {"NVSHMEM_IB_ENABLE_IBGDA", "1"},
                         {"NVSHMEM_IBGDA_NIC_HANDLER", "gpu"}},
                        k_rdma);
  EXPECT_EQ(both.status, Status::pass) << describe(both);
}

TEST(NvshmemIbgda, UnreadableParamsIsUnknown) {
  TempTree tree;
  auto out =
      run_check("nvshmem.ibgda", tree,
                {{"NVSHMEM_IB_ENABLE_IBGDA", "1"}, {"NVSHMEM_IBGDA_NIC_HANDLER", "gpu"}}, k_rdma);
  EXPECT_EQ(out.status, Status::unknown) << describe(out);
}

TEST(NvshmemIbgda, FalseValuesDoNotRequestIbgda) {
  TempTree tree;
  for (const char* value : {"0", "false", "No"}) {
    auto out = run_check("nvshmem.ibgda", tree, {{"NVSHMEM_IB_ENABLE_IBGDA", value}});
    EXPECT_EQ(out.status, Status::pass) << value << "\n" << describe(out);
  }
}

TEST(NvshmemIbgda, BuildSwitchIsOnlyANote) {
  TempTree tree;
  auto out = run_check("nvshmem.ibgda", tree, {{"NVSHMEM_IBGDA_SUPPORT", "1"}});
  EXPECT_EQ(out.status, Status::pass) << describe(out);
  EXPECT_TRUE(mentions(out, "build switch")) << describe(out);
}

TEST(NvshmemIbgda, IbgdaWithoutRdmaDevicesWarns) {
  TempTree tree;
  tree.write("/proc/driver/nvidia/params", k_params_on);
  std::map<std::string, std::string> vars{{"NVSHMEM_IB_ENABLE_IBGDA", "1"},
                                          {"NVSHMEM_IBGDA_NIC_HANDLER", "gpu"}};
  auto out = run_check("nvshmem.ibgda", tree, vars, make_snapshot(8));
  EXPECT_EQ(out.status, Status::warn) << describe(out);
  EXPECT_EQ(run_check("nvshmem.ibgda", tree, vars, k_rdma).status, Status::pass);
}

TEST(NvshmemIbgda, InvalidHandlerFails) {
  TempTree tree;
  auto out = run_check("nvshmem.ibgda", tree,
                       {{"NVSHMEM_IB_ENABLE_IBGDA", "1"}, {"NVSHMEM_IBGDA_NIC_HANDLER", "gpus"}});
  EXPECT_EQ(out.status, Status::fail) << describe(out);
}

}  // namespace
}  // namespace epkit::checks
