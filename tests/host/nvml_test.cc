#include "host/dl/nvml.h"

#include <gtest/gtest.h>

#include "host/dl/cuda.h"
#include "support/temp_tree.h"

namespace epkit::host::dl {
namespace {

// This machine has no NVIDIA driver: the loaders answer unavailable with the
// dynamic loader's own words.
TEST(HostNvml, UnavailableWithoutDriverQuotesDlerror) {
  if (DlLibrary::open({"libnvidia-ml.so.1"}).ok()) GTEST_SKIP() << "NVML present";
  auto nvml = load_nvml();
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.error().code, ErrorCode::unavailable);
  EXPECT_NE(nvml.error().message.find("libnvidia-ml.so.1"), std::string::npos);
  EXPECT_NE(nvml.error().message.find("cannot open shared object file"), std::string::npos);
  auto again = load_nvml();  // cached
  EXPECT_EQ(again.error().message, nvml.error().message);
}

TEST(HostCuda, UnavailableWithoutDriverQuotesDlerror) {
  if (DlLibrary::open({"libcuda.so.1"}).ok()) GTEST_SKIP() << "libcuda present";
  auto cuda = load_cuda();
  ASSERT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.error().code, ErrorCode::unavailable);
  EXPECT_NE(cuda.error().message.find("libcuda.so.1"), std::string::npos);
  EXPECT_NE(cuda.error().message.find("cannot open shared object file"), std::string::npos);
}

TEST(HostNvml, MissingSymbolIsNamed) {
  test::TempTree tree;
  std::string lib = test::build_shared_object(tree.path("/lib/libfake-nvml.so"),
                                              "int nvmlInit_v2(void) { return 0; }\n"
                                              "int nvmlShutdown(void) { return 0; }\n");
  ASSERT_FALSE(lib.empty());
  auto nvml = open_nvml({lib});
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.error().code, ErrorCode::unavailable);
  EXPECT_NE(nvml.error().message.find("nvmlErrorString"), std::string::npos);
  EXPECT_NE(nvml.error().message.find("undefined symbol"), std::string::npos);
}

TEST(HostNvml, FullFakeLibraryBinds) {
  test::TempTree tree;
  std::string src;
  for (const char* name :
       {"nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByPciBusId_v2",
        "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetP2PStatus",
        "nvmlSystemGetDriverVersion"}) {
    src += std::string("int ") + name + "(void) { return 3; }\n";
  }
  src += "const char* nvmlErrorString(int rc) { (void)rc; return \"Not Supported\"; }\n";
  std::string lib = test::build_shared_object(tree.path("/lib/libfake-nvml.so"), src);
  auto nvml = open_nvml({lib});
  ASSERT_TRUE(nvml.ok()) << nvml.error().message;
  EXPECT_EQ(nvml->api.init(), 3);
  EXPECT_EQ(nvml->api.describe(3), "NVML error 3 (Not Supported)");
}

TEST(HostCuda, FakeLibraryWithoutGetProcAddressUsesDlsym) {
  test::TempTree tree;
  std::string src;
  for (const char* name : {"cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet",
                           "cuDeviceGetPCIBusId", "cuDeviceCanAccessPeer", "cuGetErrorString"}) {
    src += std::string("int ") + name + "(void) { return 100; }\n";
  }
  std::string lib = test::build_shared_object(tree.path("/lib/libfake-cuda.so"), src);
  auto cuda = open_cuda({lib});
  ASSERT_TRUE(cuda.ok()) << cuda.error().message;
  EXPECT_FALSE(cuda->via_get_proc_address);
  EXPECT_EQ(cuda->api.init(0), 100);
  auto missing = open_cuda({test::build_shared_object(tree.path("/lib/libcuda-min.so"),
                                                      "int cuInit(void) { return 0; }\n")});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("cuDriverGetVersion"), std::string::npos);
}

TEST(HostCuda, PrefersGetProcAddress) {
  test::TempTree tree;
  std::string src = "#include <string.h>\n";
  for (const char* name : {"cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet",
                           "cuDeviceGetPCIBusId", "cuDeviceCanAccessPeer", "cuGetErrorString"}) {
    src += std::string("int ") + name + "(void) { return 100; }\n";
  }
  // cuInit through cuGetProcAddress answers 7; everything else falls back to dlsym.
  src +=
      "static int init_v2(unsigned f) { (void)f; return 7; }\n"
      "int cuGetProcAddress(const char* s, void** fn, int v, unsigned long long fl) {\n"
      "  (void)v; (void)fl;\n"
      "  if (strcmp(s, \"cuInit\") == 0) { *fn = (void*)init_v2; return 0; }\n"
      "  return 500;\n"
      "}\n";
  auto cuda = open_cuda({test::build_shared_object(tree.path("/lib/libfake-cuda.so"), src)});
  ASSERT_TRUE(cuda.ok()) << cuda.error().message;
  EXPECT_TRUE(cuda->via_get_proc_address);
  EXPECT_EQ(cuda->api.init(0), 7);
  int version = 0;
  EXPECT_EQ(cuda->api.driver_get_version(&version), 100);
}

TEST(HostNvml, NormalizesBusIds) {
  EXPECT_EQ(normalize_bus_id("00000000:18:00.0"), "0000:18:00.0");
  EXPECT_EQ(normalize_bus_id("0000:AB:00.1"), "0000:ab:00.1");
  EXPECT_EQ(normalize_bus_id("garbage"), "garbage");
  EXPECT_EQ(normalize_bus_id("FFFFFFFF:FF:FF.0"), "");  // H200 VM: NVSwitch hidden
}

}  // namespace
}  // namespace epkit::host::dl
