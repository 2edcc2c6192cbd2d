#include "host/env.h"

#include <fmt/format.h>

#include <cctype>
#include <fstream>
#include <sstream>

extern char** environ;  // NOLINT: POSIX

namespace epkit::host {
namespace {

bool valid_name(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name.front()))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace

Env::Env(std::map<std::string, std::string> vars, std::string origin)
    : m_vars(vars.begin(), vars.end()), m_origin(std::move(origin)) {}

Env Env::from_process() {
  Env env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view line(*entry);
    auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    env.m_vars.emplace(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
  }
  return env;
}

Result<Env> Env::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return make_error(ErrorCode::not_found, fmt::format("cannot open env file {}", path));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse(buffer.str(), path);
}

Result<Env> Env::parse(std::string_view text, std::string origin) {
  Env env;
  env.m_origin = std::move(origin);
  std::string last;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find('\0') != std::string_view::npos) {
      return make_error(ErrorCode::invalid, fmt::format("{}:{}: NUL byte: not a KEY=VALUE file",
                                                        env.m_origin, line_no));
    }
    std::string_view trimmed = line;
    while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.front()))) {
      trimmed.remove_prefix(1);
    }
    if (trimmed.empty() || trimmed.front() == '#') continue;
    if (trimmed.starts_with("export ")) trimmed.remove_prefix(7);
    auto eq = trimmed.find('=');
    if (eq != std::string_view::npos && valid_name(trimmed.substr(0, eq))) {
      last = std::string(trimmed.substr(0, eq));
      env.m_vars[last] = std::string(trimmed.substr(eq + 1));
      continue;
    }
    if (last.empty()) {
      return make_error(ErrorCode::invalid, fmt::format("{}:{}: expected KEY=VALUE, got '{}'",
                                                        env.m_origin, line_no, line.substr(0, 80)));
    }
    env.m_vars[last] += '\n';
    env.m_vars[last] += std::string(line);
  }
  return env;
}

std::optional<std::string> Env::get(std::string_view name) const {
  auto it = m_vars.find(name);
  if (it == m_vars.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> Env::get_nonempty(std::string_view name) const {
  auto value = get(name);
  if (!value || value->empty()) return std::nullopt;
  return value;
}

std::vector<std::string> Env::names_with_prefix(std::string_view prefix) const {
  std::vector<std::string> names;
  for (const auto& [name, value] : m_vars) {
    if (std::string_view(name).starts_with(prefix)) names.push_back(name);
  }
  return names;
}

void Env::unset(std::string_view name) {
  auto it = m_vars.find(name);
  if (it != m_vars.end()) m_vars.erase(it);
}

std::vector<std::string> split_path_list(std::string_view value) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= value.size()) {
    std::size_t next = value.find(':', pos);
    if (next == std::string_view::npos) next = value.size();
    if (next > pos) out.emplace_back(value.substr(pos, next - pos));
    pos = next + 1;
  }
  return out;
}

}  // namespace epkit::host
