// Golden files (tests/support/golden.h): only EPKIT_UPDATE_GOLDEN=1 rewrites,
// and a rewriting run never passes.
#include "support/golden.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <sstream>

#include "support/temp_tree.h"

namespace epkit::test {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// EPKIT_UPDATE_GOLDEN set for one scope, restored after.
class UpdateEnv {
 public:
  explicit UpdateEnv(const char* value) {
    if (const char* v = std::getenv("EPKIT_UPDATE_GOLDEN")) {
      m_saved = v;
      m_had = true;
    }
    if (value != nullptr)
      ::setenv("EPKIT_UPDATE_GOLDEN", value, 1);
    else
      ::unsetenv("EPKIT_UPDATE_GOLDEN");
  }
  ~UpdateEnv() {
    if (m_had)
      ::setenv("EPKIT_UPDATE_GOLDEN", m_saved.c_str(), 1);
    else
      ::unsetenv("EPKIT_UPDATE_GOLDEN");
  }

 private:
  std::string m_saved;
  bool m_had = false;
};

TEST(Golden, OnlyOneRequestsAnUpdate) {
  {
    UpdateEnv e(nullptr);
    EXPECT_FALSE(golden_update_requested());
  }
  for (const char* no : {"0", "", "yes", "true", "11"}) {
    UpdateEnv e(no);
    EXPECT_FALSE(golden_update_requested()) << no;
  }
  UpdateEnv e("1");
  EXPECT_TRUE(golden_update_requested());
}

TEST(Golden, ComparesWithoutTouchingTheFile) {
  TempTree t;
  t.write("/g.txt", "old\n");
  const std::string path = t.path("/g.txt");
  EXPECT_EQ(check_golden(path, "old\n", false).verdict, GoldenVerdict::match);
  GoldenCheck c = check_golden(path, "new\n", false);
  EXPECT_EQ(c.verdict, GoldenVerdict::differs);
  EXPECT_NE(c.message.find("EPKIT_UPDATE_GOLDEN=1"), std::string::npos) << c.message;
  EXPECT_EQ(read(path), "old\n");
  EXPECT_EQ(check_golden(t.path("/none.txt"), "x", false).verdict, GoldenVerdict::missing);
}

TEST(Golden, UpdateRewritesAndReportsIt) {
  TempTree t;
  t.write("/g.txt", "old\n");
  const std::string path = t.path("/g.txt");
  GoldenCheck c = check_golden(path, "new\n", true);
  EXPECT_EQ(c.verdict, GoldenVerdict::rewritten);
  EXPECT_EQ(read(path), "new\n");
  EXPECT_EQ(check_golden(path, "new\n", true).verdict, GoldenVerdict::unchanged);
}

// The old tests passed whatever EPKIT_UPDATE_GOLDEN held (even 0), having
// compared the new output with itself.
TEST(Golden, AnUpdateRunFails) {
  TempTree t;
  t.write("/g.txt", "old\n");
  const std::string path = t.path("/g.txt");
  {
    UpdateEnv e("1");
    EXPECT_NONFATAL_FAILURE(expect_golden(path, "new\n", "out"), "rewritten");
    EXPECT_NONFATAL_FAILURE(expect_golden(path, "new\n", "out"), "unchanged");
  }
  {
    UpdateEnv e("0");
    EXPECT_NONFATAL_FAILURE(expect_golden(path, "newer\n", "out"), "differs");
    EXPECT_EQ(read(path), "new\n");
    expect_golden(path, "new\n", "out");  // matches: no failure
  }
}

}  // namespace
}  // namespace epkit::test
