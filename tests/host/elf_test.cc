#include "host/elf.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/temp_tree.h"

namespace epkit::host {
namespace {

// A libibverbs look-alike: soname libibverbs.so.1, IBVERBS_1.1 and a private
// ABI version, and the provider-folder format string libibverbs compiles in.
constexpr const char* k_verbs_source = R"(
const char* verbs_provider_format(void) { return "/usr/lib/x86_64-linux-gnu/libibverbs/lib%s-rdmav57.so"; }
void* ibv_get_device_list(int* n) { *n = 0; return 0; }
void ibv_cmd_private(void) {}
)";
constexpr const char* k_verbs_script = R"(
IBVERBS_1.1 { global: ibv_get_device_list; verbs_provider_format; local: *; };
IBVERBS_PRIVATE_57 { global: ibv_cmd_private; } IBVERBS_1.1;
)";

class ElfTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_tree = new test::TempTree();
    std::string lib = s_tree->path("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.56.0");
    test::build_shared_object(lib, k_verbs_source, k_verbs_script, "-Wl,-soname,libibverbs.so.1");
    s_tree->link("/usr/lib/x86_64-linux-gnu/libibverbs.so.1", "libibverbs.so.1.14.56.0");
    // A provider linked against it: its version need names IBVERBS_PRIVATE_57.
    std::string provider = s_tree->path("/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav57.so");
    test::build_shared_object(
        provider, "void ibv_cmd_private(void);\nvoid mlx5_init(void) { ibv_cmd_private(); }\n", "",
        "-Wl,-soname,libmlx5.so.1 -L" + s_tree->path("/usr/lib/x86_64-linux-gnu") +
            " -l:libibverbs.so.1");
  }
  static void TearDownTestSuite() {
    delete s_tree;
    s_tree = nullptr;
  }
  static std::string bytes_of(const std::string& node_path) {
    std::ifstream in(s_tree->path(node_path), std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    return buffer.str();
  }
  static test::TempTree* s_tree;
};
test::TempTree* ElfTest::s_tree = nullptr;

TEST_F(ElfTest, ReadsSonameAndVersionDefinitionsThroughLinks) {
  Sysroot fs(s_tree->root());
  auto info = read_elf(fs, "/usr/lib/x86_64-linux-gnu/libibverbs.so.1");
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->path, "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.56.0");
  EXPECT_EQ(info->soname, "libibverbs.so.1");
  EXPECT_EQ(info->version_defs, (std::vector<std::string>{"IBVERBS_1.1", "IBVERBS_PRIVATE_57"}));
  EXPECT_TRUE(info->defines("IBVERBS_PRIVATE_57"));
  EXPECT_FALSE(info->defines("IBVERBS_PRIVATE_34"));
  EXPECT_FALSE(info->defines("libibverbs.so.1"));  // the base entry is not a version
}

TEST_F(ElfTest, ReadsNeededAndVersionNeeds) {
  Sysroot fs(s_tree->root());
  auto info = read_elf(fs, "/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav57.so");
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->soname, "libmlx5.so.1");
  EXPECT_NE(std::find(info->needed.begin(), info->needed.end(), "libibverbs.so.1"),
            info->needed.end());
  EXPECT_EQ(info->needs_from("libibverbs.so.1"), (std::vector<std::string>{"IBVERBS_PRIVATE_57"}));
  EXPECT_TRUE(info->needs_from("libnothing.so").empty());
}

TEST_F(ElfTest, FindsRodataStrings) {
  std::string bytes = bytes_of("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.56.0");
  auto found = elf_rodata_strings(bytes, "libibverbs", "/libibverbs/");
  ASSERT_TRUE(found.ok()) << found.error().message;
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ(found->front(), "/usr/lib/x86_64-linux-gnu/libibverbs/lib%s-rdmav57.so");
  EXPECT_TRUE(elf_rodata_strings(bytes, "libibverbs", "no-such-text")->empty());
}

TEST_F(ElfTest, RejectsOtherFormatsNamingTheFile) {
  EXPECT_EQ(parse_elf("", "/x/empty.so").error().code, ErrorCode::invalid);
  auto text = parse_elf(std::string(100, 'a'), "/x/text.so");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.error().message.find("/x/text.so"), std::string::npos);
  std::string bytes = bytes_of("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.56.0");
  std::string elf32 = bytes;
  elf32[4] = 1;  // ELFCLASS32
  EXPECT_NE(parse_elf(elf32, "a").error().message.find("64-bit"), std::string::npos);
  std::string big_endian = bytes;
  big_endian[5] = 2;
  EXPECT_NE(parse_elf(big_endian, "a").error().message.find("little-endian"), std::string::npos);
  std::string riscv = bytes;
  riscv[18] = static_cast<char>(243);  // EM_RISCV
  riscv[19] = 0;
  EXPECT_NE(parse_elf(riscv, "a").error().message.find("machine 243"), std::string::npos);
}

TEST_F(ElfTest, MissingAndNonRegularFilesAreErrors) {
  Sysroot fs(s_tree->root());
  EXPECT_EQ(read_elf(fs, "/usr/lib/none.so").error().code, ErrorCode::not_found);
  EXPECT_EQ(read_elf(fs, "/usr/lib/x86_64-linux-gnu").error().code, ErrorCode::invalid);
}

// Truncations and byte flips of a real built object: every result is a value
// or an invalid error, never a crash or a hang (run under ASan to see reads).
TEST_F(ElfTest, CorruptInputNeverCrashes) {
  for (const char* file : {"/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.56.0",
                           "/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav57.so"}) {
    std::string bytes = bytes_of(file);
    ASSERT_GT(bytes.size(), 1000u);
    std::size_t ok = 0;
    std::size_t invalid = 0;
    auto probe = [&](const std::string& image) {
      auto info = parse_elf(image, file);
      auto strings = elf_rodata_strings(image, file, "lib");
      if (info.ok()) {
        ++ok;
      } else {
        ASSERT_EQ(info.error().code, ErrorCode::invalid) << info.error().message;
        ++invalid;
      }
      if (!strings.ok()) {
        ASSERT_EQ(strings.error().code, ErrorCode::invalid);
      }
    };
    for (std::size_t length = 0; length < bytes.size(); length += 3) probe(bytes.substr(0, length));
    for (std::size_t pos = 0; pos < bytes.size(); pos += 5) {
      for (unsigned char pattern : {0xffu, 0x80u, 0x01u}) {
        std::string flipped = bytes;
        flipped[pos] = static_cast<char>(static_cast<unsigned char>(flipped[pos]) ^ pattern);
        probe(flipped);
      }
    }
    EXPECT_GT(invalid, 100u) << file;  // truncations must be noticed, not read as valid
    EXPECT_GT(ok, 100u) << file;       // flips in code bytes change nothing we read
  }
}

TEST(ElfSystem, ReadsTheInstalledLibibverbsWhenPresent) {
  Sysroot fs("/");
  auto info = read_elf(fs, "/usr/lib/x86_64-linux-gnu/libibverbs.so.1");
  if (!info.ok() && info.error().code == ErrorCode::not_found) GTEST_SKIP() << "no libibverbs";
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->soname, "libibverbs.so.1");
  EXPECT_TRUE(info->defines("IBVERBS_1.1"));
  bool has_private = false;
  for (const auto& v : info->version_defs) has_private |= v.starts_with("IBVERBS_PRIVATE_");
  EXPECT_TRUE(has_private);
}

}  // namespace
}  // namespace epkit::host
