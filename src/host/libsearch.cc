#include "host/libsearch.h"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <set>

namespace epkit::host {
namespace {

constexpr int k_max_include_depth = 8;  // include cycles must end

// Node paths matching a glob whose wildcards are in the last component only
// ("/etc/ld.so.conf.d/*.conf"), sorted as glob(3) does.
std::vector<std::string> expand_glob(const Sysroot& fs, const std::string& pattern) {
  std::string dir(dir_name(pattern));
  std::string base(base_name(pattern));
  if (base.find_first_of("*?[") == std::string::npos) return {pattern};
  auto names = fs.list(dir);
  if (!names) return {};
  std::vector<std::string> out;
  for (const auto& name : *names) {
    if (::fnmatch(base.c_str(), name.c_str(), FNM_PERIOD) == 0) out.push_back(join_path(dir, name));
  }
  return out;
}

void read_conf(const Sysroot& fs, const std::string& path, int depth, std::vector<SearchDir>& out) {
  if (depth > k_max_include_depth) return;
  auto text = fs.read(path);
  if (!text) return;
  std::string_view rest = *text;
  while (!rest.empty()) {
    auto end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    line = line.substr(0, line.find('#'));
    // ldconfig accepts folders separated by blanks, ',' or ':' on one line.
    auto words = split_any(line, " \t\r,:");
    if (words.empty()) continue;
    if (words.front() == "include") {
      for (std::size_t i = 1; i < words.size(); ++i) {
        std::string pattern = words[i];
        if (pattern.front() != '/') pattern = join_path(dir_name(path), pattern);
        for (const auto& file : expand_glob(fs, pattern)) read_conf(fs, file, depth + 1, out);
      }
      continue;
    }
    if (words.front() == "hwcap") continue;  // obsolete directive, no folder
    for (const auto& word : words) {
      if (word.front() == '/') out.push_back({word, path, 0});
    }
  }
}

}  // namespace

const std::vector<std::string>& default_library_dirs() {
  static const std::vector<std::string> dirs = {"/lib/x86_64-linux-gnu",
                                                "/usr/lib/x86_64-linux-gnu",
                                                "/lib/aarch64-linux-gnu",
                                                "/usr/lib/aarch64-linux-gnu",
                                                "/lib64",
                                                "/usr/lib64",
                                                "/lib",
                                                "/usr/lib"};
  return dirs;
}

std::vector<SearchDir> loader_search_dirs(const Sysroot& fs, const Env& env) {
  std::vector<SearchDir> all;
  if (auto value = env.get_nonempty("LD_LIBRARY_PATH")) {
    // glibc splits LD_LIBRARY_PATH on ':' and ';'.
    std::string list = *value;
    std::replace(list.begin(), list.end(), ';', ':');
    int position = 0;
    for (auto& dir : split_path_list(list))
      all.push_back({std::move(dir), "LD_LIBRARY_PATH", ++position});
  }
  read_conf(fs, "/etc/ld.so.conf", 0, all);
  for (const auto& dir : default_library_dirs()) all.push_back({dir, "default", 0});

  std::vector<SearchDir> unique;
  std::set<std::string> seen;
  for (auto& entry : all) {
    std::string key = entry.dir;
    while (key.size() > 1 && key.back() == '/') key.pop_back();
    if (seen.insert(key).second) unique.push_back(std::move(entry));
  }
  return unique;
}

std::vector<LibMatch> find_library(const Sysroot& fs, const Env& env, std::string_view soname) {
  std::vector<LibMatch> matches;
  for (const auto& dir : loader_search_dirs(fs, env)) {
    std::string node_path = join_path(dir.dir, soname);
    auto info = fs.stat(node_path);
    if (!info || info->type != FileType::regular) continue;
    auto real = fs.resolve(node_path);
    if (!real) continue;
    matches.push_back(
        {dir.dir, node_path, *real, dir.origin, dir.position, library_version(base_name(*real))});
  }
  return matches;
}

std::vector<std::string> split_any(std::string_view text, std::string_view separators) {
  std::vector<std::string> out;
  std::string item;
  for (char c : text) {
    if (separators.find(c) != std::string_view::npos) {
      if (!item.empty()) out.push_back(std::move(item));
      item.clear();
    } else {
      item += c;
    }
  }
  if (!item.empty()) out.push_back(std::move(item));
  return out;
}

std::string library_version(std::string_view file_name) {
  auto pos = file_name.find(".so.");
  if (pos == std::string_view::npos) return "unknown";
  std::string_view suffix = file_name.substr(pos + 4);
  bool numeric = !suffix.empty() && std::isdigit(static_cast<unsigned char>(suffix.front())) &&
                 std::isdigit(static_cast<unsigned char>(suffix.back())) &&
                 std::all_of(suffix.begin(), suffix.end(), [](char c) {
                   return c == '.' || std::isdigit(static_cast<unsigned char>(c));
                 });
  return numeric ? std::string(suffix) : "unknown";
}

}  // namespace epkit::host
