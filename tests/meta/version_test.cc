// One version source: CMake's project version. The binary and libraries get
// it as EPKIT_VERSION; the Python package, its build backend and pyproject
// derive it (python/epkit/_version.py); deploy/docker/build.sh reads it. The
// kustomizations' image tag cannot be derived (kustomize files are static),
// so it must agree. A second version written anywhere here fails this test.
#include <gtest/gtest.h>
#include <re2/re2.h>

#include <fstream>
#include <sstream>
#include <string>

#include "support/paths.h"

namespace epkit {
namespace {

std::string source(const std::string& rel) {
  std::ifstream in(test::source_path(rel));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(Version, CmakeProjectVersionIsTheBinarys) {
  std::string version;
  ASSERT_TRUE(
      RE2::PartialMatch(source("CMakeLists.txt"), R"(project\(epkit VERSION ([0-9.]+))", &version));
  EXPECT_EQ(version, EPKIT_VERSION);
}

TEST(Version, PythonFilesWriteNoVersionOfTheirOwn) {
  // A literal "x.y.z" in any of them is a second source.
  for (const char* rel : {"python/pyproject.toml", "python/epkit/__init__.py",
                          "python/epkit/_version.py", "python/_build/epkit_backend.py"}) {
    const std::string text = source(rel);
    ASSERT_FALSE(text.empty()) << rel;
    std::string found;
    EXPECT_FALSE(RE2::PartialMatch(text, R"((["'][0-9]+\.[0-9]+\.[0-9]+["']))", &found))
        << rel << " writes the version " << found << "; derive it from CMakeLists.txt";
  }
  const std::string pyproject = source("python/pyproject.toml");
  EXPECT_NE(pyproject.find("dynamic = [\"version\"]"), std::string::npos) << pyproject;
  EXPECT_FALSE(RE2::PartialMatch(pyproject, R"((?m)^version\s*=)")) << pyproject;
}

TEST(Version, KustomizationImageTagsAgree) {
  for (const char* rel :
       {"deploy/k8s/base/kustomization.yaml", "deploy/k8s/node-prep/kustomization.yaml"}) {
    const std::string text = source(rel);
    std::string tag;
    ASSERT_TRUE(RE2::PartialMatch(text, R"(newTag:\s*"?([^\s"]+))", &tag)) << rel;
    EXPECT_EQ(tag, EPKIT_VERSION) << rel << ": the image tag is CMake's project version";
  }
}

}  // namespace
}  // namespace epkit
