// Held-out acceptance (issue 28): log lines users pasted into public issues
// (NCCL, NVSHMEM, DeepEP, PyTorch, SGLang and other trackers), each with the
// diagnosis the maintainers or the resolution gave, in
// tests/logs/heldout/manifest.json. No rule was written from them: a case
// that failed was fixed in its general family, with a fixture of its own from
// the sources' wording (fixtures/logs/findings/*@*.log, the catalogue
// fixtures). Every case must be free of wrong findings; the share that gets
// the diagnosis is reported and must not drop below the figure
// docs/logs.md states.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "logs/analyzer.h"
#include "support/paths.h"
#include "support/temp_tree.h"

namespace epkit::logs {
namespace {

// docs/logs.md: "33 of 36 held-out cases get the maintainers' diagnosis".
constexpr std::size_t k_hits_reached = 33;

struct Outcome {
  bool hit = false;
  std::vector<std::string> wrong;
  std::vector<std::string> found;
};

std::set<std::string> strings(const nlohmann::json& list) {
  std::set<std::string> out;
  for (const auto& v : list) out.insert(v.get<std::string>());
  return out;
}

Outcome judge(const nlohmann::json& c) {
  auto report = analyze_inputs(
      {test::source_path("tests/logs/heldout/" + c.at("file").get<std::string>())}, {});
  Outcome o;
  if (!report.ok()) {
    o.wrong.push_back("error: " + report.error().message);
    return o;
  }
  std::set<std::string> expected = strings(c.at("expected"));
  std::set<std::string> also_true = strings(c.at("also_true"));
  std::size_t named = 0;
  for (const Finding& f : report->findings) {
    std::string id(f.spec->id);
    o.found.push_back(id);
    // The unnamed catch-all is never a diagnosis, right or wrong.
    if (id == "nccl.warn") continue;
    ++named;
    if (expected.count(id)) {
      o.hit = true;
    } else if (!also_true.count(id)) {
      o.wrong.push_back(id);
    }
  }
  // An empty expectation: the maintainers said the lines are harmless.
  if (expected.empty() && named == 0) o.hit = true;
  return o;
}

nlohmann::json manifest() {
  std::ifstream in(test::source_path("tests/logs/heldout/manifest.json"));
  return nlohmann::json::parse(in);
}

TEST(LogsHeldout, NoCaseGetsAWrongFindingAndMostGetTheDiagnosis) {
  nlohmann::json m = manifest();
  const auto& cases = m.at("cases");
  ASSERT_GE(cases.size(), 25u);
  std::size_t hits = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.at("url").get<std::string>());
    Outcome o = judge(c);
    hits += o.hit;
    std::string found;
    for (const auto& id : o.found) found += (found.empty() ? "" : " ") + id;
    std::printf("%-4s %-48s %s\n", o.hit ? "hit" : "miss", c.at("file").get<std::string>().c_str(),
                found.c_str());
    for (const auto& id : o.wrong) ADD_FAILURE() << c.at("file") << ": wrong finding " << id;
  }
  std::printf("held-out: %zu of %zu cases get the maintainers' diagnosis\n", hits, cases.size());
  EXPECT_GT(2 * hits, cases.size());  // "most"
  EXPECT_GE(hits, k_hits_reached);
}

TEST(LogsHeldout, EveryCaseHasItsLogASourceAndADiagnosis) {
  nlohmann::json m = manifest();
  std::set<std::string> files;
  for (const auto& c : m.at("cases")) {
    std::string file = c.at("file").get<std::string>();
    EXPECT_TRUE(files.insert(file).second) << "listed twice: " << file;
    EXPECT_TRUE(std::ifstream(test::source_path("tests/logs/heldout/" + file)).good()) << file;
    EXPECT_TRUE(c.at("url").get<std::string>().starts_with("https://github.com/")) << file;
    EXPECT_FALSE(c.at("diagnosis").get<std::string>().empty()) << file;
  }
}

}  // namespace
}  // namespace epkit::logs
