// libFuzzer target for the log line parser and analyser: any bytes, as one
// log file, must neither crash, hang nor break the invariants below. An input
// whose first line is "#slice:REGEX" is sliced by that pattern (the corpus in
// fixtures/logs/fuzz holds `.*` slices), so hostile patterns meet hostile lines.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "logs/analyzer.h"
#include "logs/line_parser.h"
#include "logs/reader.h"
#include "logs/text.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

// printable() must give valid UTF-8 with no control bytes, within its bound.
void check_printable(std::string_view s) {
  std::string p = epkit::logs::printable(s, 64);
  check(p.size() <= 64 + 6);
  for (unsigned char c : p) check(c >= 0x20 && c != 0x7F);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string slice = "iteration: ";
  if (text.starts_with("#slice:")) {
    std::size_t nl = text.find('\n');
    slice = std::string(text.substr(7, std::min<std::size_t>(nl, 263) - 7));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
  }
  epkit::logs::Options options;
  options.slice_regex = slice;
  auto analyzer = epkit::logs::Analyzer::create(options);
  if (!analyzer.ok()) return 0;  // an invalid pattern is refused, never a crash
  analyzer->begin_file("fuzz.log");
  epkit::logs::Analyzer& a = *analyzer;
  auto reader = epkit::logs::LineReader::from_memory(text);
  std::uint64_t lines = 0;
  auto done = reader.for_each_line([&](std::string_view line, std::uint64_t n) {
    check(n == ++lines);
    check(line.size() <= epkit::logs::k_max_line);
    auto info = epkit::logs::parse_line(line);
    // Every view the parser returns lies inside the line.
    for (std::string_view part : {info.rank_key, info.host, info.message}) {
      check(part.empty() ||
            (part.data() >= line.data() && part.data() + part.size() <= line.data() + line.size()));
    }
    check_printable(line);
    a.feed(line, n);
  });
  check(done.ok());
  auto report = analyzer->finish();
  check(report.lines == lines);
  for (const auto& f : report.findings) {
    check(f.evidence.size() <= epkit::logs::k_max_evidence);
    for (const auto& e : f.evidence) check(e.line >= 1 && e.line <= lines);
  }
  for (const auto& c : report.communicators) check(c.complete_count <= c.nranks);
  return 0;
}
