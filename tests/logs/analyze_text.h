// Test helper: runs the analyser over text in memory, as one file, reading
// it the way analyze_inputs does (stopping where the analyser asks).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "logs/analyzer.h"
#include "logs/reader.h"

namespace epkit::logs::test_util {

inline Report analyze_text(std::string_view text, const Options& options = {},
                           const std::string& name = "test.log") {
  auto analyzer = Analyzer::create(options);
  EXPECT_TRUE(analyzer.ok());
  if (!analyzer.ok()) return Report{};
  analyzer->begin_file(name);
  auto reader = LineReader::from_memory(text);
  Analyzer& a = *analyzer;
  EXPECT_TRUE(reader
                  .for_each_line([&a](std::string_view line, std::uint64_t n) {
                    a.feed(line, n);
                    return a.wants_more();
                  })
                  .ok());
  return analyzer->finish();
}

}  // namespace epkit::logs::test_util
