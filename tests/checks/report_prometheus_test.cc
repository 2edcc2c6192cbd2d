// epkit doctor --format prometheus: the text exposition format that
// node-exporter's textfile collector reads. deploy/checks parses the same
// output with an independent parser (npm parse-prometheus-text-format).
#include "checks/report_prometheus.h"

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "cli/command.h"
#include "support/cli_run.h"
#include "support/paths.h"

namespace epkit::checks {
namespace {

const std::string k_example = test::source_path("examples/gke-a4");
const std::string k_seed_env = test::source_path("examples/env/gke-a4-seed000.env");

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(ReportPrometheus, EscapesLabelValues) {
  EXPECT_EQ(prometheus_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(prometheus_label_value("rdma.gid-index"), "rdma.gid-index");
}

TEST(ReportPrometheus, EverySampleLineIsWellFormedAndEveryFamilyTyped) {
  auto r = test::run_epkit(
      {"doctor", "--format", "prometheus", "--sysroot", k_example, "--env-file", k_seed_env});
  ASSERT_EQ(r.code, 2) << r.err;  // the seed environment fails (README)
  const std::regex sample(
      R"re(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\.)*",?)*\})? -?[0-9.e+]+$)re");
  const std::regex comment(R"re(^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) .+$)re");
  std::map<std::string, int> typed;
  for (const auto& line : lines_of(r.out)) {
    std::smatch m;
    if (std::regex_match(line, m, comment)) {
      if (m[1] == "TYPE") ++typed[m[2]];
      continue;
    }
    ASSERT_TRUE(std::regex_match(line, m, sample)) << "not a sample line: " << line;
    EXPECT_EQ(typed.count(m[1]), 1u) << m[1] << " has no TYPE line before it";
  }
  for (const auto& [name, count] : typed) EXPECT_EQ(count, 1) << name << " typed twice";
}

TEST(ReportPrometheus, StatusIsOneHotPerCheckAndCarriesTheExitCode) {
  auto r = test::run_epkit(
      {"doctor", "--format", "prometheus", "--sysroot", k_example, "--env-file", k_seed_env});
  std::map<std::string, int> ones;
  std::map<std::string, int> rows;
  const std::regex status(R"re(^epkit_doctor_check_status\{check="([^"]+)",.* ([01])$)re");
  for (const auto& line : lines_of(r.out)) {
    std::smatch m;
    if (!std::regex_match(line, m, status)) continue;
    ++rows[m[1]];
    ones[m[1]] += m[2] == "1" ? 1 : 0;
  }
  ASSERT_FALSE(rows.empty()) << r.out;
  for (const auto& [check, n] : rows) {
    EXPECT_EQ(n, 5) << check;
    EXPECT_EQ(ones[check], 1) << check;
  }
  EXPECT_NE(r.out.find("\nepkit_doctor_exit_code 2\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epkit_doctor_check_status{check=\"nvshmem.ibgda\",group=\"nvshmem\","
                       "status=\"fail\"} 1\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\nepkit_doctor_gpus 8\n"), std::string::npos);
}

TEST(ReportPrometheus, JsonAndPrometheusTogetherIsAUsageError) {
  auto r = test::run_epkit({"doctor", "--json", "--format", "prometheus"});
  EXPECT_EQ(r.code, cli::k_exit_usage);
  EXPECT_NE(r.err.find("two formats"), std::string::npos) << r.err;
  auto bad = test::run_epkit({"doctor", "--format", "yaml"});
  EXPECT_EQ(bad.code, cli::k_exit_usage);
}

}  // namespace
}  // namespace epkit::checks
