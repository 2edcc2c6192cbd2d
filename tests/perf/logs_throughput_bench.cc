// Throughput of the log analyser on one core: a synthetic 64-rank log held
// in memory, so the figure is parsing, not disk (docs/performance.md).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "log_generator.h"
#include "logs/analyzer.h"
#include "logs/reader.h"

namespace {

const std::string& log_of(std::uint64_t bytes) {
  static std::string text;
  if (text.size() < bytes) {
    text.clear();
    text.reserve(bytes + (1 << 20));
    epkit::perf::generate_log(bytes, 64, [](std::string_view chunk) { text.append(chunk); });
  }
  return text;
}

void BM_LogsAnalyze(benchmark::State& state) {
  const std::string& text = log_of(static_cast<std::uint64_t>(state.range(0)) << 20);
  std::string_view data(text.data(), static_cast<std::size_t>(state.range(0)) << 20);
  for (auto _ : state) {
    auto analyzer = epkit::logs::Analyzer::create({});
    analyzer->begin_file("bench.log");
    auto reader = epkit::logs::LineReader::from_memory(data);
    epkit::logs::Analyzer& a = *analyzer;
    auto done =
        reader.for_each_line([&a](std::string_view line, std::uint64_t n) { a.feed(line, n); });
    auto report = analyzer->finish();
    benchmark::DoNotOptimize(report);
    // EPKIT_PERF_WRONG_RESULT: the check's own test (ctest
    // perf.logs_bench_error_fails) takes this branch on purpose.
    static const bool wrong = std::getenv("EPKIT_PERF_WRONG_RESULT") != nullptr;
    if (wrong || !done.ok() || report.ranks.size() != 64 || !report.findings.empty()) {
      state.SkipWithError("unexpected analysis result");
      break;
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(data.size()));
}
BENCHMARK(BM_LogsAnalyze)->Arg(4)->Arg(64)->Unit(benchmark::kMillisecond);

/// The console report, counting what ran and what failed: BENCHMARK_MAIN
/// exits 0 after SkipWithError and when the filter matches nothing, so a
/// smoke run of it could not fail.
class CountingReporter final : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      ++ran;
      if (run.error_occurred) ++failed;
    }
    ConsoleReporter::ReportRuns(runs);
  }
  int ran = 0;
  int failed = 0;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  CountingReporter reporter;
  const std::size_t matched = benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  if (matched == 0 || reporter.ran == 0) {
    std::fprintf(stderr, "FAIL: no benchmark matches the filter: nothing ran\n");
    return 1;
  }
  if (reporter.failed > 0) {
    std::fprintf(stderr, "FAIL: %d of %d benchmark runs stopped with an error\n", reporter.failed,
                 reporter.ran);
    return 1;
  }
  return 0;
}
