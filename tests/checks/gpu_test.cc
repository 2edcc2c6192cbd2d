#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>

#include "checks/registry.h"
#include "host/dl/cuda.h"
#include "support/paths.h"
#include "topo/example_host.h"
#include "topo/model.h"
#include "topo/probe.h"

namespace epkit::checks {
namespace {

Outcome run_check(std::string_view id, const host::Host& host, const topo::Snapshot& snap) {
  const Check* check = find_check(id);
  EXPECT_NE(check, nullptr) << id;
  return check->run(Context{host, snap});
}

std::string evidence(const Outcome& o, const std::string& key) {
  for (const auto& e : o.evidence) {
    if (e.key == key) return e.value;
  }
  return "<none>";
}

// ---- gpu.p2p --------------------------------------------------------------

// A fake driver for the A4 tree's 8 GPUs; g_denied names one pair that may
// not access peer ("a,b"), g_init_rc what cuInit answers.
int g_denied_a = -1;
int g_denied_b = -1;
int g_init_rc = 0;
const char* const k_a4_bus[] = {"0000:13:00.0", "0000:14:00.0", "0000:33:00.0", "0000:34:00.0",
                                "0000:93:00.0", "0000:94:00.0", "0000:B3:00.0", "0000:B4:00.0"};

const host::dl::CudaApi* fake_cuda() {
  static const host::dl::CudaApi api = [] {
    using namespace host::dl;
    CudaApi a;
    a.init = [](unsigned) -> CuResult { return g_init_rc; };
    a.driver_get_version = [](int* v) -> CuResult {
      *v = 13000;
      return 0;
    };
    a.device_get_count = [](int* n) -> CuResult {
      *n = 8;
      return 0;
    };
    a.device_get = [](CuDevice* d, int i) -> CuResult {
      *d = i;
      return 0;
    };
    a.device_get_pci_bus_id = [](char* out, int len, CuDevice d) -> CuResult {
      std::snprintf(out, static_cast<std::size_t>(len), "%s", k_a4_bus[d]);
      return 0;
    };
    a.device_can_access_peer = [](int* can, CuDevice x, CuDevice y) -> CuResult {
      *can = (x == g_denied_a && y == g_denied_b) ? 0 : 1;
      return 0;
    };
    a.get_error_string = [](CuResult, const char** s) -> CuResult {
      *s = "system not yet initialized";
      return 0;
    };
    return a;
  }();
  return &api;
}

host::Host fake_cuda_host() {
  auto libs = host::Libraries::none("test");
  libs.cuda = []() -> Result<const host::dl::CudaApi*> { return fake_cuda(); };
  return host::Host(host::Sysroot(test::source_path("examples/gke-a4")), host::Env({}, "test"),
                    libs);
}

// The probe stores NVML's P2P status per GPU pair; the check reads it and
// does not initialise CUDA.
topo::Snapshot with_p2p(int denied_a, int denied_b) {
  auto snap = topo::probe(test::example_host("gke-a4"));
  for (auto& g : snap.gpus) {
    g.p2p_read = std::vector<int>(snap.gpus.size(), 0);
    g.p2p_write = std::vector<int>(snap.gpus.size(), 0);
  }
  if (denied_a >= 0)
    (*snap.gpus[static_cast<std::size_t>(denied_a)].p2p_read)[static_cast<std::size_t>(denied_b)] =
        4;
  return snap;
}

TEST(GpuP2p, NvmlStatusAnswersWithoutInitialisingCuda) {
  g_init_rc = 999;  // cuInit would fail: the probed NVML status must answer first
  auto host = fake_cuda_host();
  auto o = run_check("gpu.p2p", host, with_p2p(-1, -1));
  g_init_rc = 0;
  EXPECT_EQ(o.status, Status::pass) << o.summary;
  EXPECT_EQ(evidence(o, "peer access"), "read and write OK for every pair");
}

TEST(GpuP2p, NvmlDeniedPairFails) {
  auto host = fake_cuda_host();
  auto o = run_check("gpu.p2p", host, with_p2p(2, 5));
  EXPECT_EQ(o.status, Status::fail);
  EXPECT_NE(evidence(o, "denied").find("GPU2->GPU5 read (status 4)"), std::string::npos);
}

TEST(GpuP2p, IncompleteNvmlStatusFallsBackToCuda) {
  g_denied_a = 6;
  g_denied_b = 1;
  auto host = fake_cuda_host();
  auto snap = with_p2p(-1, -1);
  snap.gpus[3].p2p_write.reset();
  auto o = run_check("gpu.p2p", host, snap);
  g_denied_a = g_denied_b = -1;
  EXPECT_EQ(o.status, Status::fail);
  EXPECT_NE(o.summary.find("1 of 56"), std::string::npos) << o.summary;
}

TEST(GpuP2p, SkipsWithoutGpu) {
  auto host = test::example_host("gke-a4");
  topo::Snapshot empty;
  EXPECT_EQ(run_check("gpu.p2p", host, empty).status, Status::skip);
}

TEST(GpuP2p, SysrootPassesWithGpuListAndNote) {
  auto host = test::example_host("gke-a4");
  auto snap = topo::probe(host);
  auto o = run_check("gpu.p2p", host, snap);
  EXPECT_EQ(o.status, Status::pass);
  EXPECT_NE(o.summary.find("not probed"), std::string::npos);
  EXPECT_EQ(evidence(o, "GPU7"), "0000:b4:00.0 NVIDIA B200");
}

TEST(GpuP2p, LiveWithoutLibcudaIsUnknown) {
  host::Host live(host::Sysroot("/"), host::Env({}, "test"),
                  host::Libraries::none("dlopen failed"));
  auto snap = topo::probe(test::example_host("gke-a4"));
  auto o = run_check("gpu.p2p", live, snap);
  EXPECT_EQ(o.status, Status::unknown);
  EXPECT_EQ(evidence(o, "libcuda"), "dlopen failed");
}

TEST(GpuP2p, EveryPairAccessiblePasses) {
  g_denied_a = g_denied_b = -1;
  g_init_rc = 0;
  auto host = fake_cuda_host();
  auto snap = topo::probe(host);
  auto o = run_check("gpu.p2p", host, snap);
  EXPECT_EQ(o.status, Status::pass) << o.summary;
  EXPECT_NE(o.summary.find("every pair"), std::string::npos);
}

TEST(GpuP2p, DeniedPairFails) {
  g_denied_a = 6;
  g_denied_b = 1;
  g_init_rc = 0;
  auto host = fake_cuda_host();
  auto snap = topo::probe(host);
  auto o = run_check("gpu.p2p", host, snap);
  g_denied_a = g_denied_b = -1;
  EXPECT_EQ(o.status, Status::fail);
  EXPECT_EQ(evidence(o, "denied"), "GPU6->GPU1");  // bus ids matched case-insensitively
}

TEST(GpuP2p, CuInitFailureFails) {
  g_init_rc = 802;
  auto host = fake_cuda_host();
  auto snap = topo::probe(host);
  auto o = run_check("gpu.p2p", host, snap);
  g_init_rc = 0;
  EXPECT_EQ(o.status, Status::fail);
  EXPECT_NE(o.summary.find("802 (system not yet initialized)"), std::string::npos);
}

TEST(GpuP2p, InactiveNvlinkWhileOthersActiveWarns) {
  g_init_rc = 0;
  auto host = fake_cuda_host();
  auto snap = topo::probe(host);
  for (auto& g : snap.gpus) {
    g.nvlinks = std::vector<topo::NvLink>{};
    for (int l = 0; l < 18; ++l) g.nvlinks->push_back({l, true, "0000:06:00.0"});
  }
  EXPECT_EQ(run_check("gpu.p2p", host, snap).status, Status::pass);
  (*snap.gpus[2].nvlinks)[5].active = false;
  auto o = run_check("gpu.p2p", host, snap);
  EXPECT_EQ(o.status, Status::warn);
  EXPECT_NE(o.summary.find("GPU2 (17 of 18)"), std::string::npos);
  EXPECT_EQ(evidence(o, "GPU2 NVLinks"), "17 of 18 active");
}

// ---- gpu.nic-affinity -------------------------------------------------------

const char* const k_a4_mapping =
    "0:mlx5_0:1,1:mlx5_1:1,2:mlx5_2:1,3:mlx5_3:1,4:mlx5_4:1,5:mlx5_5:1,6:mlx5_6:1,7:mlx5_7:1";

Outcome affinity(const std::string& example, std::map<std::string, std::string> vars) {
  auto host = test::example_host(example, host::Env(std::move(vars), "test"));
  auto snap = topo::probe(host);
  return run_check("gpu.nic-affinity", host, snap);
}

TEST(GpuNicAffinity, SkipsWithoutGpuOrNic) {
  auto host = test::example_host("gke-a4");
  topo::Snapshot empty;
  EXPECT_EQ(run_check("gpu.nic-affinity", host, empty).status, Status::skip);
  auto snap = topo::probe(host);
  snap.nics.clear();
  EXPECT_EQ(run_check("gpu.nic-affinity", host, snap).status, Status::skip);
}

TEST(GpuNicAffinity, UnsetWarnsWithTheComputedMapping) {
  auto o = affinity("gke-a4", {});
  EXPECT_EQ(o.status, Status::warn);
  EXPECT_EQ(o.fix, std::string("export DEEP_EP_DEVICE_TO_HCA_MAPPING=") + k_a4_mapping);
  EXPECT_NE(o.summary.find("mlx5_0"), std::string::npos);
}

TEST(GpuNicAffinity, ComputedDeepEpMappingPasses) {
  auto o = affinity("gke-a4", {{"DEEP_EP_DEVICE_TO_HCA_MAPPING", k_a4_mapping}});
  EXPECT_EQ(o.status, Status::pass) << o.summary;
  EXPECT_EQ(evidence(o, "NICs idle"), "-");
  EXPECT_EQ(affinity("dgx-h100", {{"DEEP_EP_DEVICE_TO_HCA_MAPPING", k_a4_mapping}}).status,
            Status::pass);
}

TEST(GpuNicAffinity, AllOnOneNicFails) {
  auto o = affinity("gke-a4", {{"DEEP_EP_DEVICE_TO_HCA_MAPPING",
                                "0:mlx5_0:1,1:mlx5_0:1,2:mlx5_2:1,3:mlx5_3:1,4:mlx5_4:1,5:mlx5_5:1,"
                                "6:mlx5_6:1,7:mlx5_7:1"}});
  EXPECT_EQ(o.status, Status::fail);
  EXPECT_NE(o.summary.find("mlx5_0 (GPU 0,1)"), std::string::npos);
  EXPECT_EQ(evidence(o, "NICs idle"), "mlx5_1");
  EXPECT_EQ(o.fix, std::string("export DEEP_EP_DEVICE_TO_HCA_MAPPING=") + k_a4_mapping);
}

TEST(GpuNicAffinity, FartherNicWarns) {
  auto o = affinity("gke-a4", {{"DEEP_EP_DEVICE_TO_HCA_MAPPING",
                                "0:mlx5_2:1,1:mlx5_1:1,2:mlx5_0:1,3:mlx5_3:1,4:mlx5_4:1,5:mlx5_5:1,"
                                "6:mlx5_6:1,7:mlx5_7:1"}});
  EXPECT_EQ(o.status, Status::warn);
  EXPECT_NE(o.summary.find("GPU0 on mlx5_2 (NODE; mlx5_0 is PIX)"), std::string::npos);
}

TEST(GpuNicAffinity, SharingIsFineWhenOnlyFarNicsAreIdle) {
  // Four compute NICs for eight GPUs: the computed mapping shares them; the
  // storage NICs stay idle and do not make it a failure.
  auto snap = topo::probe(test::example_host("dgx-h100"));
  std::erase_if(snap.nics, [](const topo::RdmaNic& n) {
    return n.name == "mlx5_1" || n.name == "mlx5_3" || n.name == "mlx5_5" || n.name == "mlx5_7";
  });
  std::string computed = topo::deep_ep_mapping(topo::assign_nics(snap));
  auto host = test::example_host("dgx-h100",
                                 host::Env({{"DEEP_EP_DEVICE_TO_HCA_MAPPING", computed}}, "test"));
  auto o = run_check("gpu.nic-affinity", host, snap);
  EXPECT_EQ(o.status, Status::pass) << o.summary;
  // Crowding two of them onto one NIC while another computed one is idle fails.
  auto crowded = test::example_host(
      "dgx-h100",
      host::Env({{"DEEP_EP_DEVICE_TO_HCA_MAPPING", "0:mlx5_0:1,1:mlx5_0:1,2:mlx5_0:1"}}, "test"));
  EXPECT_EQ(run_check("gpu.nic-affinity", crowded, snap).status, Status::fail);
}

TEST(GpuNicAffinity, GpuMissingFromMappingWarns) {
  auto o =
      affinity("gke-a4", {{"DEEP_EP_DEVICE_TO_HCA_MAPPING",
                           "0:mlx5_0:1,1:mlx5_1:1,2:mlx5_2:1,3:mlx5_3:1,4:mlx5_4:1,5:mlx5_5:1"}});
  EXPECT_EQ(o.status, Status::warn);
  EXPECT_NE(o.summary.find("GPU6,GPU7 not in the mapping"), std::string::npos);
}

TEST(GpuNicAffinity, MalformedOrUnknownHcaFails) {
  auto bad = affinity("gke-a4", {{"DEEP_EP_DEVICE_TO_HCA_MAPPING", "0:mlx5_0,1:mlx5_1:1"}});
  EXPECT_EQ(bad.status, Status::fail);
  EXPECT_NE(bad.summary.find("'0:mlx5_0'"), std::string::npos);
  auto unknown_hca = affinity("gke-a4", {{"DEEP_EP_DEVICE_TO_HCA_MAPPING", "0:mlx5_12:1"}});
  EXPECT_EQ(unknown_hca.status, Status::fail);
  EXPECT_NE(unknown_hca.summary.find("mlx5_12"), std::string::npos);
}

TEST(GpuNicAffinity, NvshmemPeMappingRoundRobin) {
  // Two listed HCAs for 8 GPUs: four GPUs each while six NICs idle.
  auto o = affinity("gke-a4", {{"NVSHMEM_ENABLE_NIC_PE_MAPPING", "1"},
                               {"NVSHMEM_HCA_LIST", "mlx5_0:1,mlx5_1:1"}});
  EXPECT_EQ(o.status, Status::fail);
  EXPECT_EQ(evidence(o, "mapping"),
            "0:mlx5_0:1,1:mlx5_1:1,2:mlx5_0:1,3:mlx5_1:1,4:mlx5_0:1,"
            "5:mlx5_1:1,6:mlx5_0:1,7:mlx5_1:1");
  // Without a list, NIC order: GPU i -> mlx5_i.
  EXPECT_EQ(affinity("gke-a4", {{"NVSHMEM_ENABLE_NIC_PE_MAPPING", "1"}}).status, Status::pass);
  auto none =
      affinity("gke-a4", {{"NVSHMEM_ENABLE_NIC_PE_MAPPING", "1"}, {"NVSHMEM_HCA_LIST", "=mlx4"}});
  EXPECT_EQ(none.status, Status::fail);
  EXPECT_NE(none.summary.find("matches no HCA"), std::string::npos);
}

TEST(GpuNicAffinity, NvshmemListWithoutPeMappingIsDistanceBased) {
  auto o = affinity("gke-a4", {{"NVSHMEM_HCA_LIST", "mlx5"}});
  EXPECT_EQ(o.status, Status::pass);
}

}  // namespace
}  // namespace epkit::checks
