#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "checks/registry.h"
#include "host/dl/ibverbs.h"
#include "support/temp_tree.h"

namespace epkit::checks {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

// ---- snapshot builder --------------------------------------------------------

topo::Gid gid(int index, std::string value, std::string type, bool ipv4) {
  topo::Gid g;
  g.index = index;
  g.gid = std::move(value);
  g.type = std::move(type);
  g.ndev = "eth0";
  g.ipv4_mapped = ipv4;
  return g;
}

// The GID table of seed 001's RoCE NICs: RoCE v2 IPv4-mapped at index 3.
std::vector<topo::Gid> roce_gids() {
  return {gid(0, "fe80:0000:0000:0000:0a00:00ff:fe00:0001", "IB/RoCE v1", false),
          gid(1, "fe80:0000:0000:0000:0a00:00ff:fe00:0001", "RoCE v2", false),
          gid(2, "0000:0000:0000:0000:0000:ffff:0a00:0001", "IB/RoCE v1", true),
          gid(3, "0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v2", true)};
}

class SnapshotBuilder {
 public:
  SnapshotBuilder& nic(std::string name, std::string link_layer = "InfiniBand",
                       std::string state = "ACTIVE", double gbps = 400, int ports = 1) {
    topo::RdmaNic n;
    n.name = std::move(name);
    n.uverbs = "uverbs" + std::to_string(m_snap.nics.size());
    for (int p = 1; p <= ports; ++p) {
      topo::IbPort port;
      port.port = p;
      port.state = state;
      port.state_code = state == "ACTIVE" ? 4 : 1;
      port.phys_state = state == "ACTIVE" ? "LinkUp" : "Disabled";
      port.rate_gbps = gbps;
      port.rate = fmt::format("{} Gb/sec (4X NDR)", gbps);
      port.link_layer = link_layer;
      if (link_layer == "Ethernet") {
        port.gids = roce_gids();
        port.roce_v2_ipv4_gid = 3;
      }
      n.ports.push_back(port);
    }
    m_snap.nics.push_back(std::move(n));
    return *this;
  }
  SnapshotBuilder& gpu() {
    topo::Gpu g;
    g.index = static_cast<int>(m_snap.gpus.size());
    g.name = "NVIDIA B200";
    m_snap.gpus.push_back(g);
    return *this;
  }
  topo::Snapshot& get() { return m_snap; }

 private:
  topo::Snapshot m_snap;
};

Outcome run_check(std::string_view id, const host::Host& host, const topo::Snapshot& snap) {
  const Check* check = find_check(id);
  EXPECT_NE(check, nullptr) << id;
  if (check == nullptr) return unknown("no such check");
  return check->run(Context{host, snap});
}

std::string evidence_text(const Outcome& out) {
  std::string text;
  for (const auto& e : out.evidence) text += e.key + "=" + e.value + " [" + e.source + "]\n";
  return text;
}

// ---- built libraries -------------------------------------------------------

// A libibverbs look-alike of one rdma-core release: the private ABI version
// and the provider-path format string libibverbs compiles in.
std::string verbs_source(int abi) {
  return fmt::format(R"(
const char* verbs_provider_format(void) {{ return "/usr/lib/x86_64-linux-gnu/libibverbs/lib%s-rdmav{}.so"; }}
void* ibv_get_device_list(int* n) {{ *n = 0; return 0; }}
void* ibv_reg_dmabuf_mr(void) {{ return 0; }}
void ibv_cmd_private(void) {{}}
)",
                     abi);
}
std::string verbs_script(int abi) {
  return fmt::format(R"(
IBVERBS_1.1 {{ global: ibv_get_device_list; verbs_provider_format; local: *; }};
IBVERBS_1.12 {{ global: ibv_reg_dmabuf_mr; }} IBVERBS_1.1;
IBVERBS_PRIVATE_{} {{ global: ibv_cmd_private; }};
)",
                     abi);
}
constexpr const char* k_provider_source =
    "void ibv_cmd_private(void);\nvoid mlx5_init(void) { ibv_cmd_private(); }\n";

class RdmaChecks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_build = new test::TempTree();
    for (auto [abi, version] : {std::pair{57, "1.14.56.0"}, std::pair{34, "1.14.50.0"}}) {
      std::string dir = s_build->path("/v" + std::to_string(abi));
      test::build_shared_object(dir + "/libibverbs.so." + version, verbs_source(abi),
                                verbs_script(abi), "-Wl,-soname,libibverbs.so.1");
      fs::create_symlink(std::string("libibverbs.so.") + version, dir + "/libibverbs.so.1");
      test::build_shared_object(dir + "/libmlx5.so", k_provider_source, "",
                                "-Wl,-soname,libmlx5.so.1 -L" + dir + " -l:libibverbs.so.1");
    }
  }
  static void TearDownTestSuite() {
    delete s_build;
    s_build = nullptr;
  }

  // Copies a built file into the tree at node path `to`.
  static void install(const test::TempTree& tree, const std::string& built, const std::string& to) {
    fs::create_directories(fs::path(tree.path(to)).parent_path());
    fs::copy_file(s_build->path(built), tree.path(to), fs::copy_options::overwrite_existing);
  }
  static void add_device(const test::TempTree& tree, const std::string& name, int uverbs,
                         const std::string& driver = "mlx5_core") {
    tree.link("/sys/class/infiniband/" + name + "/device/driver",
              "../../../../bus/pci/drivers/" + driver);
    tree.write("/dev/infiniband/uverbs" + std::to_string(uverbs), "");
  }
  // A node with one rdma-core userspace: libibverbs 1.14.50.0 (ABI 34) and
  // its mlx5 provider in the distribution folders.
  static void clean_node(const test::TempTree& tree) {
    install(tree, "/v34/libibverbs.so.1.14.50.0",
            "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0");
    tree.link("/usr/lib/x86_64-linux-gnu/libibverbs.so.1", "libibverbs.so.1.14.50.0");
    install(tree, "/v34/libmlx5.so", "/usr/lib/x86_64-linux-gnu/libmlx5.so.1.24.50.0");
    tree.link("/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so", "../libmlx5.so.1.24.50.0");
    tree.write("/etc/libibverbs.d/mlx5.driver", "driver mlx5\n");
    add_device(tree, "mlx5_0", 0);
  }
  // Seed 000 (GKE A4): the driver installer's rdma-core 1.14.56.0 (ABI 57) in
  // /usr/local/nvidia/lib64 first on LD_LIBRARY_PATH over the image's
  // 1.14.50.0 (ABI 34); a provider link into a folder that is mounted
  // elsewhere; RDMAV_DRIVERS naming a folder.
  static host::Env seed_000(const test::TempTree& tree) {
    clean_node(tree);
    install(tree, "/v57/libibverbs.so.1.14.56.0",
            "/usr/local/nvidia/lib64/libibverbs.so.1.14.56.0");
    tree.link("/usr/local/nvidia/lib64/libibverbs.so.1", "libibverbs.so.1.14.56.0");
    install(tree, "/v57/libmlx5.so", "/usr/local/nvidia/lib64/libmlx5.so.1.25.56.0");
    tree.link("/usr/local/nvidia/lib64/libmlx5.so.1", "libmlx5.so.1.25.56.0");
    tree.link("/usr/local/nvidia/lib64/libibverbs/libmlx5-rdmav57.so",
              "/home/kubernetes/bin/nvidia/lib64/libmlx5.so.1.25.56.0");
    return host::Env(
        {{"LD_LIBRARY_PATH", "/usr/local/nvidia/lib64:/usr/local/nvidia/lib:/usr/local/gib/lib64"},
         {"RDMAV_DRIVERS", "/usr/local/nvidia/lib64/libibverbs"}},
        "job env");
  }

  static test::TempTree* s_build;
};
test::TempTree* RdmaChecks::s_build = nullptr;

host::Env no_env() {
  return host::Env({}, "test");
}

// ---- rdma.verbs-lib -----------------------------------------------------------

TEST_F(RdmaChecks, VerbsLibPassesWithOneRelease) {
  test::TempTree tree;
  clean_node(tree);
  auto snap = SnapshotBuilder().nic("mlx5_0").get();
  auto out = run_check("rdma.verbs-lib", tree.host(), snap);
  EXPECT_EQ(out.status, Status::pass) << out.summary;
  EXPECT_THAT(out.summary, HasSubstr("1.14.50.0 (IBVERBS_PRIVATE_34)"));
}

TEST_F(RdmaChecks, VerbsLibFailsOnSeed000ShadowingAndSaysWhoWins) {
  test::TempTree tree;
  auto env = seed_000(tree);
  auto snap = SnapshotBuilder().nic("mlx5_0").get();
  auto out = run_check("rdma.verbs-lib", tree.host(env), snap);
  EXPECT_EQ(out.status, Status::fail);
  EXPECT_THAT(out.summary,
              HasSubstr("1.14.56.0 (IBVERBS_PRIVATE_57) in /usr/local/nvidia/lib64 wins because "
                        "LD_LIBRARY_PATH entry 1"));
  EXPECT_THAT(out.summary,
              HasSubstr("1.14.50.0 (IBVERBS_PRIVATE_34) in /usr/lib/x86_64-linux-gnu"));
  EXPECT_THAT(out.fix,
              HasSubstr("export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH"));
  // Without RDMA devices the same finding is a warning.
  auto warn = run_check("rdma.verbs-lib", tree.host(env), topo::Snapshot{});
  EXPECT_EQ(warn.status, Status::warn);
}

TEST_F(RdmaChecks, VerbsLibSkipsSysfsOnlySnapshotsAndFailsWithoutLibrary) {
  test::TempTree tree;
  tree.write("/etc/ld.so.conf.d/nvidia.conf", "/usr/local/nvidia/lib64\n");
  auto out = run_check("rdma.verbs-lib", tree.host(), topo::Snapshot{});
  EXPECT_EQ(out.status, Status::skip);
  EXPECT_THAT(out.summary, HasSubstr("sysfs-only snapshot"));

  tree.mkdir("/usr/lib/x86_64-linux-gnu");  // library folders, but no libibverbs
  auto snap = SnapshotBuilder().nic("mlx5_0").get();
  auto missing = run_check("rdma.verbs-lib", tree.host(), snap);
  EXPECT_EQ(missing.status, Status::fail);
  EXPECT_THAT(missing.fix, HasSubstr("libibverbs1"));
}

TEST_F(RdmaChecks, VerbsLibFailsWhenLoadedLibraryListsNoDevice) {
  test::TempTree tree;
  clean_node(tree);
  host::Libraries libs = host::Libraries::none("test");
  libs.ibverbs = []() -> Result<const host::dl::VerbsApi*> {
    static host::dl::VerbsApi api = [] {
      host::dl::VerbsApi a;
      a.path = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";
      return a;
    }();
    return &api;
  };
  host::Host host(host::Sysroot(tree.root()), no_env(), libs);
  auto out = run_check("rdma.verbs-lib", host, SnapshotBuilder().nic("mlx5_0").get());
  EXPECT_EQ(out.status, Status::fail);
  EXPECT_THAT(out.summary, HasSubstr("lists no device while sysfs shows 1"));
}

TEST_F(RdmaChecks, VerbsLibQuotesDlerrorOnTheLiveNode) {
  host::Libraries libs = host::Libraries::none("test");
  libs.ibverbs = []() -> Result<const host::dl::VerbsApi*> {
    return make_error(ErrorCode::unavailable,
                      "libibverbs.so.1: cannot open shared object file: No such file");
  };
  host::Host host(host::Sysroot("/"), no_env(), libs);
  auto out = run_check("rdma.verbs-lib", host, SnapshotBuilder().nic("mlx5_0").get());
  EXPECT_EQ(out.status, Status::fail);
  EXPECT_THAT(out.summary, HasSubstr("libibverbs.so.1: cannot open shared object file"));
  auto no_devices = run_check("rdma.verbs-lib", host, topo::Snapshot{});
  EXPECT_EQ(no_devices.status, Status::warn);
}

// ---- rdma.provider-abi --------------------------------------------------------

TEST_F(RdmaChecks, ProviderAbiPassesOnCleanNode) {
  test::TempTree tree;
  clean_node(tree);
  auto out = run_check("rdma.provider-abi", tree.host(), SnapshotBuilder().nic("mlx5_0").get());
  EXPECT_EQ(out.status, Status::pass) << out.summary << "\n" << evidence_text(out);
  EXPECT_THAT(out.summary, HasSubstr("IBVERBS_PRIVATE_34"));
  EXPECT_THAT(evidence_text(out),
              HasSubstr("compiled into /usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0"));
}

TEST_F(RdmaChecks, ProviderAbiFailsOnSeed000WithBothNumbers) {
  test::TempTree tree;
  auto env = seed_000(tree);
  auto out = run_check("rdma.provider-abi", tree.host(env), SnapshotBuilder().nic("mlx5_0").get());
  EXPECT_EQ(out.status, Status::fail) << out.summary;
  EXPECT_THAT(out.summary, HasSubstr("libibverbs 1.14.56.0 defines IBVERBS_PRIVATE_57"));
  EXPECT_THAT(out.summary, HasSubstr("libmlx5-rdmav34.so needs IBVERBS_PRIVATE_34"));
  EXPECT_THAT(out.fix, HasSubstr("apt-get install --reinstall libibverbs1 ibverbs-providers"));
  EXPECT_THAT(out.fix,
              HasSubstr("export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH"));
}

TEST_F(RdmaChecks, ProviderAbiReadsTheVersionNeedNotTheFileName) {
  test::TempTree tree;
  clean_node(tree);
  // An ABI-34 provider renamed to the name an ABI-57 libibverbs opens.
  install(tree, "/v57/libibverbs.so.1.14.56.0",
          "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.56.0");
  tree.link("/usr/lib/x86_64-linux-gnu/libibverbs.so.1", "libibverbs.so.1.14.56.0");
  install(tree, "/v34/libmlx5.so", "/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav57.so");
  auto out = run_check("rdma.provider-abi", tree.host(), SnapshotBuilder().nic("mlx5_0").get());
  EXPECT_EQ(out.status, Status::fail);
  EXPECT_THAT(out.summary, HasSubstr("libmlx5-rdmav57.so needs IBVERBS_PRIVATE_34"));
}

TEST_F(RdmaChecks, ProviderChecksSkipWithoutDevices) {
  test::TempTree tree;
  clean_node(tree);
  EXPECT_EQ(run_check("rdma.provider-abi", tree.host(), topo::Snapshot{}).status, Status::skip);
  EXPECT_EQ(run_check("rdma.provider-path", tree.host(), topo::Snapshot{}).status, Status::skip);
}

// ---- rdma.provider-path -------------------------------------------------------

TEST_F(RdmaChecks, ProviderPathPassesOnCleanNode) {
  test::TempTree tree;
  clean_node(tree);
  auto out = run_check("rdma.provider-path", tree.host(), SnapshotBuilder().nic("mlx5_0").get());
  EXPECT_EQ(out.status, Status::pass) << out.summary;
  EXPECT_THAT(out.summary, HasSubstr("/usr/lib/x86_64-linux-gnu/libibverbs"));
}

TEST_F(RdmaChecks, ProviderPathFailsOnSeed000AndGivesTheSeedsFix) {
  test::TempTree tree;
  auto env = seed_000(tree);
  auto out = run_check("rdma.provider-path", tree.host(env), SnapshotBuilder().nic("mlx5_0").get());
  EXPECT_EQ(out.status, Status::fail);
  EXPECT_THAT(out.summary,
              HasSubstr("/usr/local/nvidia/lib64/libibverbs/libmlx5-rdmav57.so is a link to "
                        "/home/kubernetes/bin/nvidia/lib64/libmlx5.so.1.25.56.0"));
  EXPECT_THAT(out.summary,
              HasSubstr("RDMAV_DRIVERS entry 1: /usr/local/nvidia/lib64/libibverbs is a folder"));
  EXPECT_THAT(out.summary, HasSubstr("couldn't load driver 'libmlx5-rdmav57.so'"));
  EXPECT_THAT(out.fix, HasSubstr("cp /usr/local/nvidia/lib64/libmlx5.so.1.25.56.0 "
                                 "/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav57.so"));
}

TEST_F(RdmaChecks, ProviderPathWarnsWhenOnlyRdmavDriversFindsIt) {
  test::TempTree tree;
  clean_node(tree);
  tree.remove("/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so");
  install(tree, "/v34/libmlx5.so", "/opt/providers/libmlx5-rdmav34.so");
  host::Env env({{"RDMAV_DRIVERS", "/opt/providers/libmlx5"}}, "test");
  auto out = run_check("rdma.provider-path", tree.host(env), SnapshotBuilder().nic("mlx5_0").get());
  EXPECT_EQ(out.status, Status::warn) << out.summary;
  EXPECT_THAT(out.summary, HasSubstr("found only through RDMAV_DRIVERS"));
  EXPECT_THAT(out.fix, HasSubstr("cp /opt/providers/libmlx5-rdmav34.so "
                                 "/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so"));
  // An entry that names no file fails.
  host::Env bad({{"RDMAV_DRIVERS", "/opt/providers/libmlx5:/opt/nowhere/libmlx5"}}, "test");
  auto fail =
      run_check("rdma.provider-path", tree.host(bad), SnapshotBuilder().nic("mlx5_0").get());
  EXPECT_EQ(fail.status, Status::fail);
  EXPECT_THAT(fail.summary, HasSubstr("entry 2: libibverbs opens /opt/nowhere/libmlx5-rdmav34.so"));
  host::Env name({{"RDMAV_DRIVERS", "/opt/providers/libmlx5;bnxt_re"}}, "test");
  auto unknown_name =
      run_check("rdma.provider-path", tree.host(name), SnapshotBuilder().nic("mlx5_0").get());
  EXPECT_EQ(unknown_name.status, Status::fail);
  EXPECT_THAT(unknown_name.summary,
              HasSubstr("entry 2 names driver bnxt_re, but no libbnxt_re-rdmav34.so"));
}

TEST_F(RdmaChecks, ProviderPathFailsWhenNoDriverFileListsTheProvider) {
  test::TempTree tree;
  clean_node(tree);
  tree.remove("/etc/libibverbs.d/mlx5.driver");
  tree.write("/etc/libibverbs.d/efa.driver", "driver efa\n");
  auto out = run_check("rdma.provider-path", tree.host(), SnapshotBuilder().nic("mlx5_0").get());
  EXPECT_EQ(out.status, Status::fail);
  EXPECT_THAT(out.summary, HasSubstr("\"driver mlx5\""));
  EXPECT_THAT(out.fix, HasSubstr("ibverbs-providers"));
}

// ---- rdma.devices -------------------------------------------------------------

TEST_F(RdmaChecks, DevicesPassWithUverbsAndActivePorts) {
  test::TempTree tree;
  add_device(tree, "mlx5_0", 0);
  add_device(tree, "mlx5_1", 1);
  auto out =
      run_check("rdma.devices", tree.host(), SnapshotBuilder().nic("mlx5_0").nic("mlx5_1").get());
  EXPECT_EQ(out.status, Status::pass) << out.summary;
  EXPECT_EQ(run_check("rdma.devices", tree.host(), topo::Snapshot{}).status, Status::skip);
  test::TempTree no_dev;  // a snapshot without /dev cannot tell
  EXPECT_EQ(run_check("rdma.devices", no_dev.host(), SnapshotBuilder().nic("mlx5_0").get()).status,
            Status::unknown);
}

TEST_F(RdmaChecks, DevicesFailWithoutCharDeviceInContainer) {
  test::TempTree tree;
  add_device(tree, "mlx5_0", 0);
  auto out =
      run_check("rdma.devices", tree.host(), SnapshotBuilder().nic("mlx5_0").nic("mlx5_1").get());
  EXPECT_EQ(out.status, Status::fail);
  EXPECT_THAT(out.summary, HasSubstr("/dev/infiniband/uverbs1 is missing"));
  EXPECT_THAT(out.summary, Not(HasSubstr("uverbs0")));
}

// A container given none of several devices: one sentence names them all
// (it used to repeat itself once per device).
TEST_F(RdmaChecks, DevicesMissingInContainerAreNamedInOneSentence) {
  test::TempTree tree;
  add_device(tree, "mlx5_0", 0);
  auto out = run_check("rdma.devices", tree.host(),
                       SnapshotBuilder().nic("mlx5_0").nic("mlx5_1").nic("mlx5_2").get());
  EXPECT_EQ(out.status, Status::fail);
  EXPECT_THAT(out.summary, HasSubstr("mlx5_1, mlx5_2 are in sysfs but /dev/infiniband/uverbs1, "
                                     "/dev/infiniband/uverbs2 are missing: the container was not "
                                     "given the devices"));
  EXPECT_EQ(out.summary.find("in sysfs"), out.summary.rfind("in sysfs")) << out.summary;

  auto no_uverbs = SnapshotBuilder().nic("mlx5_0").nic("mlx5_1").get();
  for (auto& nic : no_uverbs.nics) nic.uverbs.clear();
  auto none = run_check("rdma.devices", tree.host(), no_uverbs);
  EXPECT_EQ(none.status, Status::fail);
  EXPECT_THAT(none.summary, HasSubstr("mlx5_0, mlx5_1 have no uverbs device"));
  EXPECT_EQ(none.fix, "modprobe ib_uverbs");
}

TEST_F(RdmaChecks, DevicesFailWhenAllPortsDownAndWarnOnPartialOrSlow) {
  test::TempTree tree;
  add_device(tree, "mlx5_0", 0);
  add_device(tree, "mlx5_1", 1);
  auto down = run_check("rdma.devices", tree.host(),
                        SnapshotBuilder().nic("mlx5_0").nic("mlx5_1", "InfiniBand", "DOWN").get());
  EXPECT_EQ(down.status, Status::fail);
  EXPECT_THAT(down.summary, HasSubstr("mlx5_1: port 1 is DOWN"));

  auto snap = SnapshotBuilder().nic("mlx5_0").nic("mlx5_1", "InfiniBand", "ACTIVE", 400, 2).get();
  snap.nics[1].ports[1].state = "DOWN";
  auto partial = run_check("rdma.devices", tree.host(), snap);
  EXPECT_EQ(partial.status, Status::warn);
  EXPECT_THAT(partial.summary, HasSubstr("mlx5_1: port 2 is DOWN"));

  auto slow =
      run_check("rdma.devices", tree.host(),
                SnapshotBuilder().nic("mlx5_0").nic("mlx5_1", "InfiniBand", "ACTIVE", 200).get());
  EXPECT_EQ(slow.status, Status::warn);
  EXPECT_THAT(slow.summary, HasSubstr("mlx5_1 port 1 runs at 200 Gb/sec"));

  // A bond reports the sum of its members: 200 Gb/sec NICs beside a 400 Gb/sec
  // bond are not slow (the DGX example's storage NICs).
  add_device(tree, "mlx5_bond_0", 2);
  auto bonded = SnapshotBuilder()
                    .nic("mlx5_0", "Ethernet", "ACTIVE", 200)
                    .nic("mlx5_1", "Ethernet", "ACTIVE", 200)
                    .nic("mlx5_bond_0", "Ethernet", "ACTIVE", 400)
                    .get();
  bonded.nics[2].is_bond = true;
  auto with_bond = run_check("rdma.devices", tree.host(), bonded);
  EXPECT_EQ(with_bond.status, Status::pass) << with_bond.summary;
}

// ---- rdma.gid-index -----------------------------------------------------------

TEST_F(RdmaChecks, GidIndexPassesWithSeed001Setting) {
  test::TempTree tree;
  auto snap = SnapshotBuilder().nic("mlx5_0", "Ethernet").nic("mlx5_1", "Ethernet").get();
  host::Env env({{"NVSHMEM_IB_GID_INDEX", "3"}, {"NVSHMEM_IB_ENABLE_IBGDA", "1"}}, "test");
  auto out = run_check("rdma.gid-index", tree.host(env), snap);
  EXPECT_EQ(out.status, Status::pass) << out.summary;
  EXPECT_THAT(out.summary, HasSubstr("NCCL picks the GID itself"));
}

Outcome gid_check(const test::TempTree& tree, const topo::Snapshot& snap, const char* var,
                  const char* value) {
  return run_check("rdma.gid-index", tree.host(host::Env({{var, value}}, "test")), snap);
}

TEST_F(RdmaChecks, GidIndexFailsOnWrongOrMalformedIndex) {
  test::TempTree tree;
  auto snap = SnapshotBuilder().nic("mlx5_0", "Ethernet").get();
  auto wrong = gid_check(tree, snap, "NVSHMEM_IB_GID_INDEX", "1");
  EXPECT_EQ(wrong.status, Status::fail);
  EXPECT_THAT(wrong.summary, HasSubstr("not IPv4-mapped"));
  EXPECT_THAT(wrong.summary, HasSubstr("index 3"));
  EXPECT_EQ(wrong.fix, "export NVSHMEM_IB_GID_INDEX=3");

  auto junk = gid_check(tree, snap, "NCCL_IB_GID_INDEX", "3a");
  EXPECT_EQ(junk.status, Status::fail);
  EXPECT_THAT(junk.summary, HasSubstr("not an integer"));

  auto absent = gid_check(tree, snap, "NCCL_IB_GID_INDEX", "7");
  EXPECT_EQ(absent.status, Status::fail);
  EXPECT_THAT(absent.summary, HasSubstr("no such GID"));
  EXPECT_EQ(gid_check(tree, snap, "NCCL_IB_GID_INDEX", "-1").status, Status::pass);  // auto
}

TEST_F(RdmaChecks, GidIndexWarnsWhenIbgdaUsesDefaultZero) {
  test::TempTree tree;
  auto snap = SnapshotBuilder().nic("mlx5_0", "Ethernet").get();
  auto out = gid_check(tree, snap, "NVSHMEM_REMOTE_TRANSPORT", "ibgda");
  EXPECT_EQ(out.status, Status::warn);
  EXPECT_EQ(out.fix, "export NVSHMEM_IB_GID_INDEX=3");
  EXPECT_EQ(run_check("rdma.gid-index", tree.host(), snap).status, Status::pass);
  EXPECT_EQ(run_check("rdma.gid-index", tree.host(), SnapshotBuilder().nic("mlx5_0").get()).status,
            Status::skip);  // InfiniBand only
}

// ---- rdma.gpudirect -----------------------------------------------------------

void gpu_node(const test::TempTree& tree, bool open_module,
              std::string_view kernel = "6.14.0-1021-gcp") {
  tree.write("/proc/sys/kernel/osrelease", std::string(kernel) + "\n");
  tree.write(
      "/proc/driver/nvidia/version",
      open_module
          ? "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.126.09  Release Build\n"
          : "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Release Build\n");
}

TEST_F(RdmaChecks, GpudirectPassesThroughPeermemOrDmabuf) {
  auto snap = SnapshotBuilder().gpu().nic("mlx5_0").get();
  test::TempTree peer;
  gpu_node(peer, false);
  peer.write("/sys/module/nvidia_peermem/version", "580.126.09\n");
  auto out = run_check("rdma.gpudirect",
                       peer.host(host::Env({{"NCCL_NET_GDR_LEVEL", "PIX"}}, "test")), snap);
  EXPECT_EQ(out.status, Status::pass) << out.summary;
  EXPECT_THAT(out.summary, HasSubstr("peer memory (/sys/module/nvidia_peermem/version)"));
  EXPECT_THAT(out.summary, HasSubstr("NCCL_NET_GDR_LEVEL=PIX"));

  test::TempTree dmabuf;
  gpu_node(dmabuf, true);
  clean_node(dmabuf);  // its libibverbs defines IBVERBS_1.12
  auto via_dmabuf = run_check("rdma.gpudirect", dmabuf.host(), snap);
  EXPECT_EQ(via_dmabuf.status, Status::pass) << via_dmabuf.summary;
  EXPECT_THAT(via_dmabuf.summary, HasSubstr("DMA-BUF"));
}

TEST_F(RdmaChecks, GpudirectFailsWithNeitherPath) {
  auto snap = SnapshotBuilder().gpu().nic("mlx5_0").get();
  test::TempTree proprietary;
  gpu_node(proprietary, false);
  auto out = run_check("rdma.gpudirect", proprietary.host(), snap);
  EXPECT_EQ(out.status, Status::fail);
  EXPECT_THAT(out.summary, HasSubstr("proprietary NVIDIA kernel module"));
  EXPECT_THAT(out.fix, HasSubstr("modprobe nvidia_peermem"));

  test::TempTree disabled;
  gpu_node(disabled, true);
  auto off = run_check("rdma.gpudirect",
                       disabled.host(host::Env({{"NCCL_DMABUF_ENABLE", "0"}}, "test")), snap);
  EXPECT_EQ(off.status, Status::fail);
  EXPECT_THAT(off.summary, HasSubstr("NCCL_DMABUF_ENABLE=0"));

  test::TempTree old_kernel;
  gpu_node(old_kernel, true, "5.4.0-150-generic");
  EXPECT_THAT(run_check("rdma.gpudirect", old_kernel.host(), snap).summary, HasSubstr("< 5.12"));
}

TEST_F(RdmaChecks, GpudirectSkipsWithoutGpusOrNics) {
  test::TempTree tree;
  EXPECT_EQ(run_check("rdma.gpudirect", tree.host(), SnapshotBuilder().nic("mlx5_0").get()).status,
            Status::skip);
  EXPECT_EQ(run_check("rdma.gpudirect", tree.host(), SnapshotBuilder().gpu().get()).status,
            Status::skip);
}

}  // namespace
}  // namespace epkit::checks
