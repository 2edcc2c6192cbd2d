// Rules over the whole tree:
// - every repo path named in docs/*.md, README.md and source comments exists;
// - only src/host/ reads or writes the process environment (host::Env,
//   host::set_process_env): everything else takes the Env it is given, so
//   --env-file means what it says;
// - only tests/support/paths.cc sees the checkout's paths as macros.
//
// Paths:
// A path is a token whose first part is a top-level folder of the tree
// (src/, tests/, docs/, ...), a folder under src/ (include style: "runtime/
// store.h" is src/runtime/store.h), or "epkit" (include/epkit, python/epkit),
// and which names a file (its last part has an extension), a folder (a
// trailing '/'), a set (`store.{h,cc}`) or a prefix (`ep_bench*`). It exists
// when the tree has it at the top, under src/, include/ or python/. Paths
// that are not this tree's (DeepEP's tests, the wheel's layout, build
// outputs) are listed with their reason in doc_paths_allowlist.txt.
#include <gtest/gtest.h>
#include <re2/re2.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "support/paths.h"

namespace epkit {
namespace {

namespace fs = std::filesystem;

const fs::path k_root = test::source_dir();

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool path_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == '+' ||
         c == '@' || c == '-' || c == '/';
}

// The comments of a C, C++ or CUDA source: // lines and /* */ blocks.
std::string cc_comments(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i + 1 < text.size(); ++i) {
    if (text[i] == '"') {  // skip string literals: "a/b" in code is not a comment
      for (++i; i < text.size() && text[i] != '"' && text[i] != '\n'; ++i) {
        if (text[i] == '\\') ++i;
      }
      continue;
    }
    if (text[i] == '/' && text[i + 1] == '/') {
      std::size_t end = text.find('\n', i);
      if (end == std::string::npos) end = text.size();
      out.append(text, i + 2, end - i - 2).push_back('\n');
      i = end;
    } else if (text[i] == '/' && text[i + 1] == '*') {
      std::size_t end = text.find("*/", i + 2);
      if (end == std::string::npos) end = text.size();
      out.append(text, i + 2, end - i - 2).push_back('\n');
      i = end;
    }
  }
  return out;
}

// The comments of a Python file or shell script or CMake file: # lines, and
// (Python) docstrings.
std::string hash_comments(const std::string& text, bool docstrings) {
  std::string out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::size_t at = line.find_first_not_of(" \t");
    if (at != std::string::npos && line[at] == '#') out += line.substr(at + 1) + "\n";
  }
  if (docstrings) {
    for (std::size_t at = text.find("\"\"\""); at != std::string::npos;) {
      std::size_t end = text.find("\"\"\"", at + 3);
      if (end == std::string::npos) break;
      out += text.substr(at + 3, end - at - 3) + "\n";
      at = text.find("\"\"\"", end + 3);
    }
  }
  return out;
}

// The code of a C, C++ or CUDA source: comments and string literals blanked.
std::string cc_code(const std::string& text) {
  std::string out = text;
  for (std::size_t i = 0; i + 1 < out.size(); ++i) {
    if (out[i] == '"') {
      for (++i; i < out.size() && out[i] != '"' && out[i] != '\n'; ++i) {
        if (out[i] == '\\') out[i++] = ' ';
        if (i < out.size()) out[i] = ' ';
      }
    } else if (out[i] == '/' && out[i + 1] == '/') {
      for (; i < out.size() && out[i] != '\n'; ++i) out[i] = ' ';
    } else if (out[i] == '/' && out[i + 1] == '*') {
      for (; i + 1 < out.size() && !(out[i] == '*' && out[i + 1] == '/'); ++i) out[i] = ' ';
    }
  }
  return out;
}

struct Scan {
  std::set<std::string> firsts;  // first parts that make a token a repo path
  std::set<std::string> allowed;
  std::map<std::string, std::set<std::string>> missing;  // path -> files naming it

  bool exists(const std::string& p) const {
    for (const char* under : {"", "src/", "include/", "python/"}) {
      std::error_code ec;
      if (fs::exists(k_root / (std::string(under) + p), ec)) return true;
    }
    return false;
  }

  // Something in p's folder whose name starts with p's last part.
  bool prefix_exists(const std::string& p) const {
    const std::size_t slash = p.rfind('/');
    const std::string dir = p.substr(0, slash);
    const std::string stem = p.substr(slash + 1);
    for (const char* under : {"", "src/", "include/", "python/"}) {
      std::error_code ec;
      fs::path folder = k_root / (std::string(under) + dir);
      if (!fs::is_directory(folder, ec)) continue;
      for (const auto& entry : fs::directory_iterator(folder, ec)) {
        if (entry.path().filename().string().rfind(stem, 0) == 0) return true;
      }
    }
    return false;
  }

  void check(const std::string& p, const std::string& shown, bool prefix, const std::string& file) {
    if (allowed.count(shown) != 0 || allowed.count(p) != 0) return;
    if (prefix ? prefix_exists(p) : exists(p)) return;
    missing[shown].insert(file);
  }

  void text(const std::string& text, const std::string& file) {
    const std::size_t n = text.size();
    for (std::size_t i = 0; i < n;) {
      if (!path_char(text[i])) {
        ++i;
        continue;
      }
      std::size_t j = i;
      while (j < n && path_char(text[j])) ++j;
      std::string token = text.substr(i, j - i);
      char next = j < n ? text[j] : '\0';
      i = j;
      // A sentence's full stop or dash is not part of the path (but
      // `store.{h,cc}` and `nccl.*` keep their dot).
      while (next != '{' && next != '*' && !token.empty() &&
             (token.back() == '.' || token.back() == '-')) {
        token.pop_back();
      }
      if (token.empty() || token.front() == '/' || token.find('/') == std::string::npos) continue;
      if (firsts.count(token.substr(0, token.find('/'))) == 0) continue;
      if (token.find("//") != std::string::npos) continue;
      const std::string last = token.substr(token.rfind('/') + 1);
      if (next == '{' && token.back() != '/') {
        // store.{h,cc}: every alternative.
        std::size_t close = text.find('}', j);
        if (close == std::string::npos || close - j > 64) continue;
        std::string rest;
        for (std::size_t k = close + 1; k < n && path_char(text[k]); ++k) rest += text[k];
        std::istringstream alts(text.substr(j + 1, close - j - 1));
        for (std::string alt; std::getline(alts, alt, ',');) {
          check(token + alt + rest, token + "{" + text.substr(j + 1, close - j - 1) + "}" + rest,
                false, file);
        }
        continue;
      }
      if (next == '*') {
        check(token, token + "*", true, file);
        continue;
      }
      const bool folder = token.back() == '/';
      const std::size_t dot = last.rfind('.');
      const bool has_extension = dot != std::string::npos && dot > 0 && dot + 1 < last.size() &&
                                 std::isalpha(static_cast<unsigned char>(last[dot + 1])) != 0;
      if (!folder && !has_extension) continue;
      check(folder ? token.substr(0, token.size() - 1) : token, token, false, file);
    }
  }
};

Scan make_scan() {
  Scan scan;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(k_root, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name != "build" && (name[0] != '.' || name == ".ci")) {
      scan.firsts.insert(name);
    }
  }
  for (const auto& e : fs::directory_iterator(k_root / "src", ec)) {
    if (e.is_directory()) scan.firsts.insert(e.path().filename().string());
  }
  scan.firsts.insert("epkit");
  std::istringstream allow(read(k_root / "tests/meta/doc_paths_allowlist.txt"));
  for (std::string line; std::getline(allow, line);) {
    line = line.substr(0, line.find('#'));
    line.erase(std::remove_if(line.begin(), line.end(), ::isspace), line.end());
    if (!line.empty()) scan.allowed.insert(line);
  }
  return scan;
}

TEST(DocPaths, EveryPathNamedInDocsAndCommentsExists) {
  Scan scan = make_scan();
  ASSERT_FALSE(scan.allowed.empty()) << "tests/meta/doc_paths_allowlist.txt is missing";
  std::size_t files = 0;
  auto rel = [](const fs::path& p) { return fs::relative(p, k_root).string(); };
  std::vector<fs::path> docs = {k_root / "README.md"};
  for (const auto& e : fs::directory_iterator(k_root / "docs")) {
    if (e.path().extension() == ".md") docs.push_back(e.path());
  }
  for (const auto& p : docs) {
    scan.text(read(p), rel(p));
    ++files;
  }
  for (const char* top : {"src", "include", "tests", "python", "scripts", "tools", "examples"}) {
    std::error_code ec;
    if (!fs::is_directory(k_root / top, ec)) continue;
    for (auto it = fs::recursive_directory_iterator(k_root / top, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      const fs::path& p = it->path();
      const std::string name = p.filename().string();
      if (it->is_directory() && (name == "build" || name == "node_modules" || name[0] == '.')) {
        it.disable_recursion_pending();
        continue;
      }
      if (!it->is_regular_file()) continue;
      const std::string ext = p.extension().string();
      std::string comments;
      if (ext == ".cc" || ext == ".h" || ext == ".cu" || ext == ".cuh" || ext == ".cpp") {
        comments = cc_comments(read(p));
      } else if (ext == ".py") {
        comments = hash_comments(read(p), true);
      } else if (ext == ".sh" || name == "CMakeLists.txt") {
        comments = hash_comments(read(p), false);
      } else {
        continue;
      }
      scan.text(comments, rel(p));
      ++files;
    }
  }
  EXPECT_GT(files, 100u);
  std::string report;
  for (const auto& [path, where] : scan.missing) {
    report += "  " + path + "  (named in";
    for (const auto& w : where) report += " " + w;
    report += ")\n";
  }
  EXPECT_TRUE(scan.missing.empty())
      << scan.missing.size()
      << " path(s) named in docs/*.md, README.md or source comments do not exist (fix the "
         "reference, or list a path that is not this tree's in tests/meta/doc_paths_allowlist.txt "
         "with its reason):\n"
      << report;
}

// A rule "only these files may use X": every match of `use` (one capture
// group) in the code (comments and strings blanked) of the C++ and CUDA
// files under `tops`, except under `exempt` (a folder or a file), as
// "  path: match" lines. `files` counts the files read.
std::string uses_outside(const RE2& use, std::initializer_list<const char*> tops,
                         const fs::path& exempt, std::size_t& files) {
  std::string report;
  for (const char* top : tops) {
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(k_root / top, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      const fs::path& p = it->path();
      if (p == exempt) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      const std::string ext = p.extension().string();
      if (!it->is_regular_file() ||
          (ext != ".cc" && ext != ".h" && ext != ".cu" && ext != ".cuh" && ext != ".cpp")) {
        continue;
      }
      ++files;
      const std::string code = cc_code(read(p));
      re2::StringPiece rest(code);
      std::string match;
      while (RE2::FindAndConsume(&rest, use, &match)) {
        report += "  " + fs::relative(p, k_root).string() + ": " + match + "\n";
      }
    }
  }
  return report;
}

// The three places that broke the rule (cli/main.cc's NO_COLOR, the NCCL log
// capture of `epkit test`, runtime/gpu_share.cc's NCCL_HOSTID) go through
// host/ now; a fourth fails here.
TEST(TreeRules, OnlyHostTouchesTheProcessEnvironment) {
  const RE2 call(R"(\b((?:(?:secure_)?getenv|setenv|putenv|unsetenv|clearenv)\s*\(|environ\b))");
  std::size_t files = 0;
  const std::string report =
      uses_outside(call, {"src", "include", "python/epkit/csrc"}, k_root / "src/host", files);
  EXPECT_GT(files, 100u);
  EXPECT_TRUE(report.empty())
      << "the process environment is read or written outside src/host/ (take the host::Env "
         "you are given, or host::set_process_env):\n"
      << report;
}

// The paths CMake knows (source tree, built binary, compiler) are string
// literals as long as the checkout's folder; a test file that concatenates one
// builds or fails GCC 12's -Warray-bounds by that length (CI failed in its
// folder on a commit that built in ours). They reach the tests through
// tests/support/paths.h alone.
TEST(TreeRules, CheckoutPathsReachTestsThroughOneFile) {
  const RE2 macro(R"(\b(EPKIT_(?:SOURCE_DIR|BINARY|CXX_COMPILER))\b)");
  std::size_t files = 0;
  const std::string report =
      uses_outside(macro, {"tests"}, k_root / "tests/support/paths.cc", files);
  EXPECT_GT(files, 100u);
  EXPECT_TRUE(report.empty())
      << "a checkout path used as a macro outside tests/support/paths.cc "
         "(call test::source_path, test::epkit_binary or test::cxx_compiler):\n"
      << report;
}

}  // namespace
}  // namespace epkit
