#include "logs/text.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace epkit::logs {
namespace {

TEST(LogsText, PrintableReplacesInvalidUtf8AndControls) {
  EXPECT_EQ(printable("plain"), "plain");
  EXPECT_EQ(printable("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(printable("a\xFF"
                      "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(printable("\xC3"), "\xEF\xBF\xBD");  // truncated sequence
  EXPECT_EQ(printable("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(printable(std::string_view("a\0b\x1b", 4)),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
  EXPECT_EQ(printable("a\tb"), "a b");
  // Whatever the bytes, the result is valid JSON text.
  std::string garbage;
  for (int i = 0; i < 256; ++i) garbage += static_cast<char>(i);
  EXPECT_NO_THROW(nlohmann::json(printable(garbage, 4096)).dump());
}

TEST(LogsText, PrintableCutsLongTextOnACharacterBoundary) {
  std::string long_line(1000, 'x');
  std::string out = printable(long_line, 100);
  EXPECT_LE(out.size(), 110u);
  EXPECT_TRUE(out.ends_with(" [...]"));
  std::string euro;
  for (int i = 0; i < 50; ++i) euro += "\xE2\x82\xAC";
  EXPECT_NO_THROW(nlohmann::json(printable(euro, 10)).dump());
}

TEST(LogsText, Numbers) {
  EXPECT_EQ(parse_uint("123abc"), 123u);
  EXPECT_FALSE(parse_uint("x1").has_value());
  EXPECT_FALSE(parse_uint("").has_value());
  EXPECT_EQ(number_after("rank 3 nranks 16", " nranks "), 16);
  EXPECT_EQ(number_after("x=-1", "x="), -1);
  EXPECT_FALSE(number_after("nranks", " nranks ").has_value());
  EXPECT_EQ(word_after("commId 0xabc - Init", "commId "), "0xabc");
  EXPECT_EQ(word_after("none", "commId "), "");
  EXPECT_EQ(find_bytes("abc", ""), 0u);
}

}  // namespace
}  // namespace epkit::logs
