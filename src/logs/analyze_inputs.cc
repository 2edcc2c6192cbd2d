#include "logs/analyzer.h"
#include "logs/reader.h"

namespace epkit::logs {

Result<Report> analyze_inputs(const std::vector<std::string>& inputs, const Options& options) {
  auto analyzer = Analyzer::create(options);
  if (!analyzer) return analyzer.error();
  auto paths = expand_inputs(inputs);
  if (!paths) return paths.error();
  for (const auto& path : *paths) {
    auto reader = LineReader::open(path);
    if (!reader) return reader.error();
    analyzer->begin_file(reader->name());
    Analyzer& a = *analyzer;
    auto done = reader->for_each_line([&a](std::string_view line, std::uint64_t n) {
      a.feed(line, n);
      return a.wants_more();
    });
    analyzer->add_bytes(reader->bytes_read());
    if (!done) return done.error();
  }
  return analyzer->finish();
}

}  // namespace epkit::logs
