#include "logs/reader.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "support/temp_tree.h"

namespace epkit::logs {
namespace {

std::vector<std::string> lines_of(LineReader reader) {
  std::vector<std::string> out;
  auto done = reader.for_each_line([&](std::string_view line, std::uint64_t n) {
    EXPECT_EQ(n, out.size() + 1);
    out.emplace_back(line);
  });
  EXPECT_TRUE(done.ok());
  return out;
}

TEST(LogsReader, CrlfAndTruncatedLastLine) {
  auto lines = lines_of(LineReader::from_memory("a\r\nb\n\nlast"));
  EXPECT_EQ(lines, (std::vector<std::string>{"a", "b", "", "last"}));
  EXPECT_TRUE(lines_of(LineReader::from_memory("")).empty());
}

TEST(LogsReader, LongLinesAreCutNotKept) {
  std::string data =
      "short\n" + std::string(k_max_line * 3, 'x') + "\nafter\n" + std::string(k_max_line + 5, 'y');
  auto lines = lines_of(LineReader::from_memory(data));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "short");
  EXPECT_EQ(lines[1].size(), k_max_line);
  EXPECT_EQ(lines[2], "after");
  EXPECT_EQ(lines[3].size(), k_max_line);
}

TEST(LogsReader, LinesAcrossBlockBoundaries) {
  // More than one 4 MiB block of numbered lines: none lost or split.
  std::string data;
  for (int i = 0; i < 600000; ++i) data += "line " + std::to_string(i) + "\n";
  auto lines = lines_of(LineReader::from_memory(data));
  ASSERT_EQ(lines.size(), 600000u);
  for (int i = 0; i < 600000; i += 9973)
    EXPECT_EQ(lines[static_cast<std::size_t>(i)], "line " + std::to_string(i));
}

TEST(LogsReader, ReadsGzipAndPlainFiles) {
  test::TempTree tree;
  tree.write("plain.log", "one\ntwo\n");
  std::string gz_path = tree.path("z.log.gz");
  gzFile gz = gzopen(gz_path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  gzputs(gz, "x\r\ny\n");
  gzclose(gz);
  auto plain = LineReader::open(tree.path("plain.log"));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(lines_of(std::move(*plain)), (std::vector<std::string>{"one", "two"}));
  auto zipped = LineReader::open(gz_path);
  ASSERT_TRUE(zipped.ok());
  EXPECT_EQ(lines_of(std::move(*zipped)), (std::vector<std::string>{"x", "y"}));
}

TEST(LogsReader, TruncatedGzipIsAnErrorNamingTheFile) {
  test::TempTree tree;
  std::string gz_path = tree.path("cut.log.gz");
  gzFile gz = gzopen(gz_path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  std::string body;
  for (int i = 0; i < 20000; ++i)
    body += "node1:1:1 [0] NCCL INFO line " + std::to_string(i * 7919) + "\n";
  gzwrite(gz, body.data(), static_cast<unsigned>(body.size()));
  gzclose(gz);
  std::filesystem::resize_file(gz_path, std::filesystem::file_size(gz_path) / 2);
  auto reader = LineReader::open(gz_path);
  ASSERT_TRUE(reader.ok());
  auto done = reader->for_each_line([](std::string_view, std::uint64_t) {});
  ASSERT_FALSE(done.ok());
  EXPECT_NE(done.error().message.find("cut.log.gz"), std::string::npos) << done.error().message;
}

TEST(LogsReader, ExpandsFoldersGlobsAndNamesMissingInputs) {
  test::TempTree tree;
  tree.write("run/b.log", "");
  tree.write("run/a.log", "");
  tree.write("run/sub/c.log.gz", "");
  auto dir = expand_inputs({tree.path("run")});
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(*dir, (std::vector<std::string>{tree.path("run/a.log"), tree.path("run/b.log"),
                                            tree.path("run/sub/c.log.gz")}));
  auto glob = expand_inputs({tree.path("run/*.log")});
  ASSERT_TRUE(glob.ok());
  EXPECT_EQ(glob->size(), 2u);
  auto stdin_only = expand_inputs({"-"});
  ASSERT_TRUE(stdin_only.ok());
  EXPECT_EQ(*stdin_only, std::vector<std::string>{"-"});

  auto missing = expand_inputs({tree.path("run/a.log"), tree.path("nope.log")});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("nope.log"), std::string::npos);
  auto no_match = expand_inputs({tree.path("run/*.txt")});
  ASSERT_FALSE(no_match.ok());
  EXPECT_NE(no_match.error().message.find("*.txt"), std::string::npos);
  EXPECT_FALSE(expand_inputs({}).ok());
  EXPECT_FALSE(LineReader::open(tree.path("nope.log")).ok());
  EXPECT_FALSE(LineReader::open(tree.path("run")).ok());
}

}  // namespace
}  // namespace epkit::logs
