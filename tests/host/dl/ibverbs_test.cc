#include "host/dl/ibverbs.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

namespace epkit::host::dl {
namespace {

// Sets a variable for one test and restores it.
class ScopedVar {
 public:
  ScopedVar(const char* name, const char* value) : m_name(name) {
    if (const char* old = std::getenv(name)) m_old = old;
    ::setenv(name, value, 1);
  }
  ~ScopedVar() {
    if (m_old.empty()) {
      ::unsetenv(m_name);
    } else {
      ::setenv(m_name, m_old.c_str(), 1);
    }
  }
  ScopedVar(const ScopedVar&) = delete;
  ScopedVar& operator=(const ScopedVar&) = delete;

 private:
  const char* m_name;
  std::string m_old;
};

std::size_t sysfs_device_count() {
  std::error_code ec;
  std::size_t n = 0;
  for (auto it = std::filesystem::directory_iterator("/sys/class/infiniband", ec);
       !ec && it != std::filesystem::directory_iterator(); ++it) {
    ++n;
  }
  return n;
}

TEST(VerbsApi, LoadsTheInstalledLibraryAndCountsDevices) {
  auto api = load_ibverbs();
  if (!api.ok() && !std::filesystem::exists("/usr/lib/x86_64-linux-gnu/libibverbs.so.1") &&
      !std::filesystem::exists("/usr/lib/aarch64-linux-gnu/libibverbs.so.1")) {
    GTEST_SKIP() << "libibverbs is not installed: " << api.error().message;
  }
  ASSERT_TRUE(api.ok()) << api.error().message;
  EXPECT_NE((*api)->path.find("libibverbs.so"), std::string::npos) << (*api)->path;
  EXPECT_NE((*api)->get_device_list, nullptr);
  // Devices libibverbs lists are the sysfs devices whose provider loads: none
  // on a machine without RDMA hardware, at most the sysfs count elsewhere.
  std::size_t in_sysfs = sysfs_device_count();
  if (in_sysfs == 0) {
    EXPECT_EQ((*api)->device_count, 0);
  } else {
    EXPECT_LE(static_cast<std::size_t>((*api)->device_count), in_sysfs);
  }
  EXPECT_EQ((*api)->device_names.size(), static_cast<std::size_t>((*api)->device_count));
  EXPECT_EQ(load_ibverbs().value(), *api);  // cached
}

TEST(VerbsApi, BadOverrideReportsDlerror) {
  ScopedVar var("EPKIT_IBVERBS_LIB", "/nonexistent/libibverbs.so.1");
  auto names = ibverbs_candidates();
  ASSERT_EQ(names, (std::vector<std::string>{"/nonexistent/libibverbs.so.1"}));
  DlLibrary holder;
  auto api = open_ibverbs(names, holder);
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.error().code, ErrorCode::unavailable);
  EXPECT_NE(
      api.error().message.find("/nonexistent/libibverbs.so.1: cannot open shared object file"),
      std::string::npos)
      << api.error().message;
  EXPECT_FALSE(holder.loaded());
}

TEST(VerbsApi, LibraryWithoutVersionedSymbolsIsRefused) {
  DlLibrary holder;
  auto api = open_ibverbs({"libz.so.1"}, holder);
  ASSERT_FALSE(api.ok());
  EXPECT_NE(api.error().message.find("lacks ibv_get_device_list"), std::string::npos)
      << api.error().message;
}

}  // namespace
}  // namespace epkit::host::dl
