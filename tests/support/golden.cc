#include "support/golden.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace epkit::test {

bool golden_update_requested() {
  const char* v = std::getenv("EPKIT_UPDATE_GOLDEN");
  return v != nullptr && std::string(v) == "1";
}

GoldenCheck check_golden(const std::string& path, const std::string& actual, bool update) {
  GoldenCheck c;
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  const bool present = static_cast<bool>(in);
  if (update) {
    if (present && text.str() == actual) {
      c.verdict = GoldenVerdict::unchanged;
      c.message = path + ": EPKIT_UPDATE_GOLDEN=1, unchanged; run again without it to compare";
      return c;
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc) << actual;
    c.verdict = GoldenVerdict::rewritten;
    c.message = path +
                ": rewritten (EPKIT_UPDATE_GOLDEN=1); review the diff, then run again "
                "without it to compare";
    return c;
  }
  if (!present) {
    c.verdict = GoldenVerdict::missing;
    c.message = path + ": no golden file; run the test with EPKIT_UPDATE_GOLDEN=1 to write it";
    return c;
  }
  if (text.str() == actual) {
    c.verdict = GoldenVerdict::match;
    return c;
  }
  c.verdict = GoldenVerdict::differs;
  c.message = path +
              " differs; if the change is meant, run the test with EPKIT_UPDATE_GOLDEN=1 "
              "and review the diff";
  return c;
}

void expect_golden(const std::string& path, const std::string& actual, const std::string& what) {
  const GoldenCheck c = check_golden(path, actual, golden_update_requested());
  if (c.verdict == GoldenVerdict::differs) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    EXPECT_EQ(actual, text.str()) << what << ": " << c.message;
  } else if (c.verdict != GoldenVerdict::match) {
    ADD_FAILURE() << what << ": " << c.message;
  }
}

}  // namespace epkit::test
