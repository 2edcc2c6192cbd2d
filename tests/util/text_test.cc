#include "util/text.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "util/json.h"

namespace epkit::util {
namespace {

TEST(Utf8, ValidSequencesAndTheInvalidOnes) {
  EXPECT_EQ(utf8_sequence("a"), 1u);
  EXPECT_EQ(utf8_sequence("\xC3\xA9"), 2u);
  EXPECT_EQ(utf8_sequence("\xE2\x82\xAC"), 3u);
  EXPECT_EQ(utf8_sequence("\xF0\x9F\x98\x80"), 4u);
  for (const char* bad : {"\x80", "\xC0\xAF", "\xC3", "\xE0\x80\x80", "\xED\xA0\x80",
                          "\xF4\x90\x80\x80", "\xFF", "\xF0\x9F\x98"}) {
    EXPECT_EQ(utf8_sequence(bad), 0u) << ::testing::PrintToString(bad);
  }
  EXPECT_EQ(valid_utf8("a\xFF"
                       "b\xC3\xA9"),
            "a\xEF\xBF\xBD"
            "b\xC3\xA9");
}

// nlohmann's dump threw type_error 316 on these: 350 of 3,300 cases aborted.
TEST(Json, DumpReplacesInvalidUtf8) {
  nlohmann::json j = {{"vendor", std::string("Goo\xFFgle\xC3")}};
  EXPECT_THROW((void)j.dump(), nlohmann::json::type_error);
  EXPECT_EQ(dump_json(j), "{\"vendor\":\"Goo\xEF\xBF\xBDgle\xEF\xBF\xBD\"}");
  nlohmann::ordered_json o = {{"x", std::string("\xFE")}};
  EXPECT_NO_THROW((void)dump_json(o, 2));
}

TEST(TerminalSafe, ControlBytesAreShownEscaped) {
  EXPECT_EQ(terminal_safe("ok\tline\n"), "ok\tline\n");
  EXPECT_EQ(terminal_safe(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(terminal_safe("\x1b]0;title\x07\x1b[2J\r\x7f"),
            "\\x1b]0;title\\x07\\x1b[2J\\x0d\\u007f");
  EXPECT_EQ(terminal_safe("\xC2\x9B"
                          "31m"),
            "\\u009b31m");  // C1 CSI
  // A JSON document stays valid and equal: DEL and C1 are valid raw in JSON.
  nlohmann::json j = std::string("a\x7f\xC2\x9B\x1b");
  EXPECT_EQ(nlohmann::json::parse(terminal_safe(dump_json(j))), j);
  EXPECT_EQ(terminal_safe("bad\xFF"), "bad\\xff");
  EXPECT_EQ(terminal_safe("caf\xC3\xA9"), "caf\xC3\xA9");
  // Colour stays only where the CLI allows it.
  EXPECT_EQ(terminal_safe("\x1b[1;31mFAIL\x1b[0m", true), "\x1b[1;31mFAIL\x1b[0m");
  EXPECT_EQ(terminal_safe("\x1b[1;31mFAIL", false), "\\x1b[1;31mFAIL");
  EXPECT_EQ(terminal_safe("\x1b[2J", true), "\\x1b[2J");
}

TEST(OneLine, NewlinesCannotEndAComment) {
  EXPECT_EQ(one_line("Google\nexport X=$(id)\r\n"), "Google\\x0aexport X=$(id)\\x0d\\x0a");
  EXPECT_EQ(one_line("plain text"), "plain text");
}

}  // namespace
}  // namespace epkit::util
