#include "env/job_env.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>

namespace epkit::env {
namespace {

std::string_view strip(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A code point as UTF-8 (the \x and \u escapes of a YAML double-quoted
// scalar).
void append_code_point(std::string& out, unsigned code) {
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
}

// A YAML scalar: double-quoted (\" \\ \n \t \r \0 \xNN \uNNNN escapes), single-quoted ('' for
// '), or plain (a trailing " # comment" dropped).
std::string scalar(std::string_view s) {
  s = strip(s);
  std::string out;
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') {
    s = s.substr(1, s.size() - 2);
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\\' || i + 1 >= s.size()) {
        out += s[i];
        continue;
      }
      char e = s[++i];
      std::size_t hex = e == 'x' ? 2 : e == 'u' ? 4 : 0;
      if (hex != 0 && i + hex < s.size()) {  // the digits are s[i+1 .. i+hex]
        unsigned code = 0;
        bool ok = true;
        for (std::size_t k = 1; ok && k <= hex; ++k) {
          int d = hex_digit(s[i + k]);
          ok = d >= 0;
          code = code * 16 + static_cast<unsigned>(ok ? d : 0);
        }
        if (ok) {
          i += hex;
          append_code_point(out, code);
          continue;
        }
      }
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '0':
          out += '\0';
          break;
        default:
          out += e;  // \" \\ \/ and the rest: the character itself
      }
    }
    return out;
  }
  if (s.size() >= 2 && s.front() == '\'' && s.back() == '\'') {
    s = s.substr(1, s.size() - 2);
    for (std::size_t i = 0; i < s.size(); ++i) {
      out += s[i];
      if (s[i] == '\'' && i + 1 < s.size() && s[i + 1] == '\'') ++i;
    }
    return out;
  }
  auto hash = s.find(" #");
  return std::string(strip(s.substr(0, hash)));
}

}  // namespace

bool looks_like_k8s_env(std::string_view text) {
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    std::string_view t = strip(line);
    if (t.empty() || t.front() == '#') continue;
    return t == "env:" || t.starts_with("- name:");
  }
  return false;
}

Result<host::Env> parse_k8s_env(std::string_view text, std::string origin) {
  std::map<std::string, std::string> vars;
  std::map<std::string, std::size_t> first_line;
  std::istringstream lines{std::string(text)};
  std::string line;
  std::string name;
  bool skipping = false;  // inside a valueFrom: block
  std::size_t line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (line.find('\0') != std::string::npos) {
      return make_error(ErrorCode::invalid,
                        fmt::format("{}:{}: NUL byte: not a k8s env: list", origin, line_no));
    }
    std::string_view t = strip(line);
    if (t.empty() || t.front() == '#' || t == "env:") continue;
    if (t.starts_with("- name:")) {
      name = scalar(t.substr(7));
      if (name.empty()) {
        return make_error(ErrorCode::invalid, fmt::format("{}:{}: empty name", origin, line_no));
      }
      // Kubernetes takes printable ASCII without '=' only.
      if (std::any_of(name.begin(), name.end(),
                      [](char c) { return c < 0x21 || c > 0x7E || c == '='; })) {
        return make_error(ErrorCode::invalid,
                          fmt::format("{}:{}: '{}' is not a variable name", origin, line_no, name));
      }
      if (auto [it, fresh] = first_line.emplace(name, line_no); !fresh) {
        return make_error(ErrorCode::invalid,
                          fmt::format("{}:{}: {} is listed twice (first on line {})", origin,
                                      line_no, name, it->second));
      }
      vars[name] = "";
      skipping = false;
      continue;
    }
    if (t.starts_with("value:") && !name.empty()) {
      vars[name] = scalar(t.substr(6));
      continue;
    }
    if (t.starts_with("valueFrom:") && !name.empty()) {
      vars.erase(name);  // a secret or field reference: no value here to check
      name.clear();
      skipping = true;
      continue;
    }
    if (skipping) continue;  // the keys under valueFrom
    return make_error(ErrorCode::invalid,
                      fmt::format("{}:{}: expected an env: entry (- name: / value:), got '{}'",
                                  origin, line_no, t.substr(0, 80)));
  }
  return host::Env(std::move(vars), std::move(origin));
}

Result<host::Env> read_job_env(const std::string& path) {
  auto read = host::read_env_file(path);
  if (!read) return read.error();
  const std::string& text = *read;
  if (looks_like_k8s_env(text)) return parse_k8s_env(text, path);
  return host::Env::parse(text, path);
}

}  // namespace epkit::env
