#include "checks/check_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <sstream>

namespace epkit::checks {
namespace {

void append_unique(std::vector<std::string>& out, const std::string& text) {
  if (!text.empty() && std::find(out.begin(), out.end(), text) == out.end()) out.push_back(text);
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (const auto& part : parts) {
    if (!out.empty()) out += sep;
    out += part;
  }
  return out;
}

}  // namespace

void Findings::add(Status status, std::string summary, std::string expected, std::string fix) {
  m_items.push_back({status, std::move(summary), std::move(expected), std::move(fix)});
}

void Findings::evidence(std::string key, std::string value, std::string source) {
  m_evidence.push_back({std::move(key), std::move(value), std::move(source)});
}

Status Findings::worst() const {
  Status out = Status::pass;
  for (const auto& item : m_items) out = worse(out, item.status);
  return out;
}

Outcome Findings::finish(std::string quiet_summary) const {
  Outcome out;
  out.status = worst();
  out.evidence = m_evidence;
  std::vector<std::string> summaries;
  std::vector<std::string> expected;
  std::vector<std::string> fixes;
  for (const auto& item : m_items) {
    if (item.status == out.status) append_unique(summaries, item.summary);
    if (item.status == Status::pass || item.status == Status::skip) continue;
    append_unique(expected, item.expected);
    append_unique(fixes, item.fix);
  }
  if (out.status == Status::pass) {
    out.summary = std::move(quiet_summary);
    if (!summaries.empty()) out.summary += " (" + join(summaries, "; ") + ")";
  } else {
    out.summary = join(summaries, "; ");
  }
  out.expected = join(expected, "; ");
  out.fix = join(fixes, "; ");
  return out;
}

std::string env_source(const host::Env& env) {
  return env.origin() == "process environment" ? std::string("env") : "env file " + env.origin();
}

std::string to_lower(std::string_view text) {
  std::string out(text);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string> loader_dirs(const host::Env& env) {
  static constexpr std::string_view k_system_dirs[] = {"/lib",
                                                       "/usr/lib",
                                                       "/lib64",
                                                       "/usr/lib64",
                                                       "/lib/x86_64-linux-gnu",
                                                       "/usr/lib/x86_64-linux-gnu",
                                                       "/lib/aarch64-linux-gnu",
                                                       "/usr/lib/aarch64-linux-gnu"};
  std::vector<std::string> dirs;
  if (auto path = env.get("LD_LIBRARY_PATH")) dirs = host::split_path_list(*path);
  for (auto dir : k_system_dirs) dirs.emplace_back(dir);
  return dirs;
}

bool iequals(std::string_view a, std::string_view b) {
  return to_lower(a) == to_lower(b);
}

bool nvshmem_bool(const std::optional<std::string>& value) {
  if (!value) return false;
  if (value->empty()) return true;
  char c = value->front();
  return !(c == '0' || c == 'n' || c == 'N' || c == 'f' || c == 'F');
}

bool truthy(std::string_view value) {
  std::string v = to_lower(value);
  return v == "1" || v == "y" || v == "yes" || v == "true" || v == "on";
}

std::string trim(std::string_view text) {
  std::size_t b = text.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  std::size_t e = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(b, e - b + 1));
}

bool ibgda_requested(const host::Env& env) {
  return nvshmem_bool(env.get("NVSHMEM_IB_ENABLE_IBGDA")) ||
         iequals(trim(env.get("NVSHMEM_REMOTE_TRANSPORT").value_or("")), "ibgda");
}

Result<std::string> read_keyed_line(const host::Sysroot& fs, std::string_view path,
                                    std::string_view key) {
  auto text = fs.read(path);
  if (!text) return text.error();
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with(key)) return trim(std::string_view(line).substr(key.size()));
  }
  return make_error(ErrorCode::invalid, fmt::format("{}: no '{}' line", path, key));
}

Result<std::set<std::string>> read_proc_modules(const host::Sysroot& fs) {
  auto text = fs.read("/proc/modules");
  if (!text) return text.error();
  std::set<std::string> names;
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string name;
    if (fields >> name) names.insert(name);
  }
  return names;
}

ModuleState module_state(const host::Sysroot& fs, const Result<std::set<std::string>>& modules,
                         std::string_view name) {
  if (modules && modules->count(std::string(name)) != 0) return {true, "/proc/modules"};
  std::string sys_path = "/sys/module/" + std::string(name);
  if (fs.is_dir(sys_path)) return {true, sys_path};
  return {false, modules ? "/proc/modules" : sys_path};
}

}  // namespace epkit::checks
