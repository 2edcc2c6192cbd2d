#include "host/dl/nccl.h"

#include <gtest/gtest.h>

#include "support/temp_tree.h"

namespace epkit::host::dl {
namespace {

#ifdef EPKIT_WITH_CUDA

TEST(HostNccl, MissingLibraryIsUnavailableNamingIt) {
  auto nccl = open_nccl({"/nonexistent/libnccl.so.2"});
  ASSERT_FALSE(nccl.ok());
  EXPECT_EQ(nccl.error().code, ErrorCode::unavailable);
  EXPECT_NE(nccl.error().message.find("/nonexistent/libnccl.so.2"), std::string::npos);
}

TEST(HostNccl, LibraryWithoutAnEntryPointNamesIt) {
  test::TempTree tree;
  std::string lib = test::build_shared_object(tree.path("/lib/libfake-nccl.so"),
                                              "int ncclGetVersion(int* v) { *v = 22809; return 0; }\n");
  ASSERT_FALSE(lib.empty());
  auto nccl = open_nccl({lib});
  ASSERT_FALSE(nccl.ok());
  EXPECT_EQ(nccl.error().code, ErrorCode::unavailable);
  EXPECT_NE(nccl.error().message.find("ncclGetUniqueId"), std::string::npos)
      << nccl.error().message;
}

TEST(HostNccl, VersionStrings) {
  EXPECT_EQ(nccl_version_string(22809), "2.28.9");
  EXPECT_EQ(nccl_version_string(21903), "2.19.3");
  EXPECT_EQ(nccl_version_string(2708), "2.7.8");
}

#else

TEST(HostNccl, BuildWithoutCudaSaysSo) {
  EXPECT_NE(nccl_not_built().message.find("without CUDA"), std::string::npos);
}

#endif

}  // namespace
}  // namespace epkit::host::dl
