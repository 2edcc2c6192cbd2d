#include <gtest/gtest.h>

#include "checks/check_fixture.h"

namespace epkit::checks {
namespace {

using test::describe;
using test::make_snapshot;
using test::mentions;
using test::run_check;
using test::TempTree;

// A GKE node with gIB installed under /usr/local/gib.
void install_gib(const TempTree& tree) {
  tree.write("/usr/local/gib/lib64/libnccl-net.so", "");
  tree.write("/usr/local/gib/configs/tuner_config_a4.txtpb", "tuner {}\n");
  tree.write("/usr/local/gib/scripts/set_nccl_env.sh", "");
}

constexpr const char* k_tuner = "/usr/local/gib/configs/tuner_config_a4.txtpb";

TEST(NcclNetPlugin, NothingSetPasses) {
  TempTree tree;
  auto out = run_check("nccl.net-plugin", tree, {});
  EXPECT_EQ(out.status, Status::pass) << describe(out);
  EXPECT_TRUE(mentions(out, "NCCL picks its network itself"));
}

TEST(NcclNetPlugin, GibWithoutPluginFails) {
  TempTree tree;
  auto out = run_check("nccl.net-plugin", tree, {{"NCCL_NET", "gIB"}});
  EXPECT_EQ(out.status, Status::fail) << describe(out);
  EXPECT_TRUE(mentions(out, "gIB net plugin is not reachable")) << describe(out);
}

TEST(NcclNetPlugin, GibFullySetUpPasses) {
  TempTree tree;
  install_gib(tree);
  auto out = run_check("nccl.net-plugin", tree,
                       {{"NCCL_NET", "gib"},  // NCCL compares names case-insensitively
                        {"LD_LIBRARY_PATH", "/usr/local/nvidia/lib64:/usr/local/gib/lib64"},
                        {"NCCL_TUNER_CONFIG_PATH", k_tuner}});
  EXPECT_EQ(out.status, Status::pass) << describe(out);
}

TEST(NcclNetPlugin, GibPluginOffTheLoaderPathFails) {
  TempTree tree;
  install_gib(tree);
  auto out = run_check("nccl.net-plugin", tree,
                       {{"NCCL_NET", "gIB"}, {"NCCL_TUNER_CONFIG_PATH", k_tuner}});
  EXPECT_EQ(out.status, Status::fail) << describe(out);
  EXPECT_TRUE(mentions(out, "LD_LIBRARY_PATH=/usr/local/gib/lib64")) << describe(out);
}

TEST(NcclNetPlugin, GibPresentNeedsTunerConfig) {
  TempTree tree;
  install_gib(tree);
  std::map<std::string, std::string> vars{{"LD_LIBRARY_PATH", "/usr/local/gib/lib64"}};
  auto unset = run_check("nccl.net-plugin", tree, vars);
  EXPECT_EQ(unset.status, Status::fail) << describe(unset);
  EXPECT_TRUE(mentions(unset, "NCCL_TUNER_PLUGIN=none"));
  EXPECT_TRUE(mentions(unset, "set_nccl_env.sh"));

  vars["NCCL_TUNER_CONFIG_PATH"] = "/usr/local/gib/configs/tuner_config_a3u.txtpb";
  auto missing = run_check("nccl.net-plugin", tree, vars);
  EXPECT_EQ(missing.status, Status::fail) << describe(missing);
  EXPECT_TRUE(mentions(missing, "cannot be read")) << describe(missing);

  vars.erase("NCCL_TUNER_CONFIG_PATH");
  vars["NCCL_TUNER_PLUGIN"] = "none";
  EXPECT_EQ(run_check("nccl.net-plugin", tree, vars).status, Status::pass);
}

TEST(NcclNetPlugin, NonblockingCommsUnderGibFail) {
  TempTree tree;
  install_gib(tree);
  std::map<std::string, std::string> vars{{"NCCL_NET", "gIB"},
                                          {"LD_LIBRARY_PATH", "/usr/local/gib/lib64"},
                                          {"NCCL_TUNER_CONFIG_PATH", k_tuner},
                                          {"TORCH_NCCL_USE_COMM_NONBLOCKING", "0"}};
  auto out = run_check("nccl.net-plugin", tree, vars);
  EXPECT_EQ(out.status, Status::fail) << describe(out);
  EXPECT_EQ(out.fix, "unset TORCH_NCCL_USE_COMM_NONBLOCKING");
  // Without gIB the variable is PyTorch's business only.
  TempTree plain;
  auto no_gib = run_check("nccl.net-plugin", plain, {{"TORCH_NCCL_USE_COMM_NONBLOCKING", "0"}});
  EXPECT_EQ(no_gib.status, Status::pass) << describe(no_gib);
}

TEST(NcclNetPlugin, IbWithoutRdmaDevicesFails) {
  TempTree tree;
  auto none = run_check("nccl.net-plugin", tree, {{"NCCL_NET", "IB"}}, make_snapshot(8));
  EXPECT_EQ(none.status, Status::fail) << describe(none);
  auto some = run_check("nccl.net-plugin", tree, {{"NCCL_NET", "IB"}},
                        make_snapshot(8, {"mlx5_0", "mlx5_1"}));
  EXPECT_EQ(some.status, Status::pass) << describe(some);
}

TEST(NcclNetPlugin, NamedPluginIsLookedUpAsLibncclNetName) {
  TempTree tree;
  tree.write("/opt/aws-ofi/lib/libnccl-net-ofi.so", "");
  std::map<std::string, std::string> vars{{"NCCL_NET", "AWS Libfabric"},
                                          {"NCCL_NET_PLUGIN", "ofi"}};
  EXPECT_EQ(run_check("nccl.net-plugin", tree, vars).status, Status::fail);
  vars["LD_LIBRARY_PATH"] = "/opt/aws-ofi/lib";
  auto out = run_check("nccl.net-plugin", tree, vars);
  EXPECT_EQ(out.status, Status::pass) << describe(out);
  vars["NCCL_NET_PLUGIN"] = "libnccl-net-ofi.so";  // a library name is taken as is
  EXPECT_EQ(run_check("nccl.net-plugin", tree, vars).status, Status::pass);
  vars["NCCL_NET_PLUGIN"] = "/opt/aws-ofi/lib/libnccl-net-ofi.so";
  EXPECT_EQ(run_check("nccl.net-plugin", tree, vars).status, Status::pass);
  vars["NCCL_NET_PLUGIN"] = "none";
  EXPECT_EQ(run_check("nccl.net-plugin", tree, vars).status, Status::fail);
}

TEST(NcclIfname, UnsetPasses) {
  TempTree tree;
  auto out = run_check("nccl.ifname", tree, {}, make_snapshot(0, {}, {"eth0", "lo"}));
  EXPECT_EQ(out.status, Status::pass) << describe(out);
}

TEST(NcclIfname, MissingInterfaceFails) {
  TempTree tree;
  auto snap = make_snapshot(0, {}, {"eth0", "lo"});
  auto out = run_check("nccl.ifname", tree, {{"NCCL_SOCKET_IFNAME", "eth0,ens9"}}, snap);
  EXPECT_EQ(out.status, Status::fail) << describe(out);
  EXPECT_TRUE(mentions(out, "'ens9'")) << describe(out);
  auto good = run_check("nccl.ifname", tree, {{"NCCL_SOCKET_IFNAME", "=eth0"}}, snap);
  EXPECT_EQ(good.status, Status::pass) << describe(good);
}

TEST(NcclIfname, PoorInterfacesWarn) {
  TempTree tree;
  auto snap = make_snapshot(0, {}, {"eth0", "lo", "docker0", "veth12ab"});
  for (const char* value : {"lo", "=docker0", "veth", "^eth0"}) {
    auto out = run_check("nccl.ifname", tree, {{"NCCL_SOCKET_IFNAME", value}}, snap);
    EXPECT_EQ(out.status, Status::warn) << value << "\n" << describe(out);
    EXPECT_EQ(out.fix, "export NCCL_SOCKET_IFNAME='=eth0'") << describe(out);
  }
  auto excluded = run_check("nccl.ifname", tree, {{"NCCL_SOCKET_IFNAME", "^docker,lo,veth"}}, snap);
  EXPECT_EQ(excluded.status, Status::pass) << describe(excluded);
}

TEST(NcclIfname, SelectingNothingFails) {
  TempTree tree;
  auto out = run_check("nccl.ifname", tree, {{"NCCL_SOCKET_IFNAME", "^eth0,lo"}},
                       make_snapshot(0, {}, {"eth0", "lo"}));
  EXPECT_EQ(out.status, Status::fail) << describe(out);
  EXPECT_TRUE(mentions(out, "selects no interface"));
}

TEST(NcclIfname, LinkLocalOnlyInterfaceWarnsForIpv6) {
  TempTree tree;
  tree.write("/proc/net/if_inet6",
             "fe80000000000000020000fffe000001 03 40 20 80     eth1\n"
             "20010db8000000000000000000000001 02 40 00 80     eth0\n"
             "fe80000000000000020000fffe000002 02 40 20 80     eth0\n");
  auto snap = make_snapshot(0, {}, {"eth0", "eth1", "lo"});
  std::map<std::string, std::string> vars{{"NCCL_SOCKET_FAMILY", "AF_INET6"},
                                          {"NCCL_SOCKET_IFNAME", "=eth1"}};
  auto out = run_check("nccl.ifname", tree, vars, snap);
  EXPECT_EQ(out.status, Status::warn) << describe(out);
  EXPECT_TRUE(mentions(out, "link-local")) << describe(out);
  vars["NCCL_SOCKET_IFNAME"] = "=eth0";
  EXPECT_EQ(run_check("nccl.ifname", tree, vars, snap).status, Status::pass);
}

TEST(NcclIfname, IbHcaMatchingNothingFails) {
  TempTree tree;
  auto snap = make_snapshot(8, {"mlx5_0", "mlx5_1"});
  auto out = run_check("nccl.ifname", tree, {{"NCCL_IB_HCA", "=mlx5_9"}}, snap);
  EXPECT_EQ(out.status, Status::fail) << describe(out);
  EXPECT_EQ(out.fix, "unset NCCL_IB_HCA, or list the devices: export NCCL_IB_HCA='=mlx5_0,mlx5_1'");
  auto port = run_check("nccl.ifname", tree, {{"NCCL_IB_HCA", "mlx5_0:2"}}, snap);
  EXPECT_EQ(port.status, Status::fail) << describe(port);
  auto good = run_check("nccl.ifname", tree, {{"NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1"}}, snap);
  EXPECT_EQ(good.status, Status::pass) << describe(good);
  auto partial = run_check("nccl.ifname", tree, {{"NCCL_IB_HCA", "=mlx5_0,mlx5_7"}}, snap);
  EXPECT_EQ(partial.status, Status::warn) << describe(partial);
}

TEST(NcclIfname, IbHcaSelectingBondWarns) {
  TempTree tree;
  auto snap = make_snapshot(8, {"mlx5_0", "mlx5_1", "mlx5_bond_0"});
  auto out = run_check("nccl.ifname", tree, {{"NCCL_IB_HCA", "mlx5"}}, snap);
  EXPECT_EQ(out.status, Status::warn) << describe(out);
  EXPECT_EQ(out.fix, "export NCCL_IB_HCA='=mlx5_0,mlx5_1'") << describe(out);
  auto excluded = run_check("nccl.ifname", tree, {{"NCCL_IB_HCA", "^mlx5_bond_0:1"}}, snap);
  EXPECT_EQ(excluded.status, Status::pass) << describe(excluded);
}

TEST(NcclIfname, IbHcaWithoutRdmaWarnsAndMisplacedCaretWarns) {
  TempTree tree;
  auto none = run_check("nccl.ifname", tree, {{"NCCL_IB_HCA", "mlx5"}}, make_snapshot(1));
  EXPECT_EQ(none.status, Status::warn) << describe(none);
  auto caret = run_check("nccl.ifname", tree, {{"NCCL_IB_HCA", "mlx5_0,^mlx5_1"}},
                         make_snapshot(1, {"mlx5_0", "mlx5_1"}));
  EXPECT_EQ(caret.status, Status::warn) << describe(caret);
  EXPECT_TRUE(mentions(caret, "only at the start")) << describe(caret);
}

}  // namespace
}  // namespace epkit::checks
