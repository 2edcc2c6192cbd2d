#include "host/env.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "host/sysroot.h"

extern char** environ;  // NOLINT: POSIX

namespace epkit::host {

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

Result<void> set_process_env(const std::string& name, const std::string& value) {
  if (::setenv(name.c_str(), value.c_str(), 1) != 0) {
    return make_error(ErrorCode::internal,
                      fmt::format("setenv {}: {}", name, std::strerror(errno)));
  }
  return {};
}

Result<std::string> read_env_file(const std::string& path) {
  auto text = read_regular_file(path, fmt::format("env file {}", path), Env::k_max_file_bytes,
                                OverLimit::fail);
  if (!text) {
    ErrorCode code =
        text.error().code == ErrorCode::not_found ? ErrorCode::not_found : ErrorCode::invalid;
    return make_error(code, text.error().message);
  }
  return text;
}

Result<Env> Env::from_file(const std::string& path) {
  auto text = read_env_file(path);
  if (!text) return text.error();
  return parse(*text, path);
}

namespace {

bool blank(char c) {
  return c == ' ' || c == '\t';
}
bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

// The env-file grammar (host/env.h, docs/env.md) over the whole text, since a
// quoted value may span lines.
class EnvParser {
 public:
  EnvParser(std::string_view text, const std::string& origin) : m_text(text), m_origin(origin) {}

  Result<std::map<std::string, std::string, std::less<>>> run() {
    if (auto nul = m_text.find('\0'); nul != std::string_view::npos) {
      std::size_t line =
          1 + static_cast<std::size_t>(std::count(m_text.begin(), m_text.begin() + nul, '\n'));
      return fail(line, "NUL byte: not a KEY=VALUE file");
    }
    if (m_text.starts_with("\xEF\xBB\xBF")) m_pos = 3;  // a UTF-8 byte order mark
    while (m_pos < m_text.size()) {
      if (auto error = statement()) return *error;
    }
    return std::move(m_vars);
  }

 private:
  char peek() const { return m_pos < m_text.size() ? m_text[m_pos] : '\n'; }
  bool at_end_of_line() const { return m_pos >= m_text.size() || m_text[m_pos] == '\n'; }
  void skip_blanks() {
    while (m_pos < m_text.size() && (blank(m_text[m_pos]) || m_text[m_pos] == '\r')) ++m_pos;
  }
  void skip_line() {
    while (m_pos < m_text.size() && m_text[m_pos] != '\n') ++m_pos;
  }
  void next_line() {
    if (m_pos < m_text.size()) ++m_pos;  // the '\n'
    ++m_line;
  }
  std::string_view line_text(std::size_t from) const {
    std::size_t end = m_text.find('\n', from);
    std::string_view line = m_text.substr(from, end == std::string_view::npos ? end : end - from);
    return line.substr(0, 80);
  }
  Error fail(std::size_t line, std::string what) const {
    return make_error(ErrorCode::invalid, fmt::format("{}:{}: {}", m_origin, line, what));
  }
  // Blanks then a comment or the line's end; anything else is an error.
  std::optional<Error> end_of_statement(std::string_view name) {
    skip_blanks();
    if (peek() == '#') skip_line();
    if (!at_end_of_line()) {
      return fail(m_line, fmt::format("text after the value of {} (a shell would run it as a "
                                      "command): '{}'",
                                      name, line_text(m_pos)));
    }
    next_line();
    return std::nullopt;
  }

  std::optional<Error> statement() {
    std::size_t begin = m_pos;
    skip_blanks();
    if (at_end_of_line()) {
      next_line();
      return std::nullopt;
    }
    if (peek() == '#') {
      skip_line();
      next_line();
      return std::nullopt;
    }
    bool exported = false;
    if (m_text.substr(m_pos).starts_with("export") && m_pos + 6 < m_text.size() &&
        blank(m_text[m_pos + 6])) {
      exported = true;
      m_pos += 6;
      skip_blanks();
    }
    std::size_t name_begin = m_pos;
    while (m_pos < m_text.size() && name_char(m_text[m_pos])) ++m_pos;
    std::string name(m_text.substr(name_begin, m_pos - name_begin));
    bool good_name = !name.empty() && std::isdigit(static_cast<unsigned char>(name[0])) == 0;
    if (good_name && exported && peek() != '=') {
      // `export NAME ...`: marks names for export, sets nothing.
      while (true) {
        skip_blanks();
        if (at_end_of_line() || peek() == '#') break;
        std::size_t from = m_pos;
        while (m_pos < m_text.size() && name_char(m_text[m_pos])) ++m_pos;
        if (m_pos == from)
          return fail(m_line, fmt::format("expected KEY=VALUE, got '{}'", line_text(begin)));
      }
      skip_line();
      next_line();
      return std::nullopt;
    }
    if (!good_name || peek() != '=') {
      return fail(m_line, fmt::format("expected KEY=VALUE, got '{}'", line_text(begin)));
    }
    ++m_pos;  // '='
    std::size_t line = m_line;
    std::string value;
    if (peek() == '"' || peek() == '\'') {
      if (auto error = shell_word(value)) return error;
      if (auto error = end_of_statement(name)) return error;
    } else {
      std::size_t from = m_pos;
      skip_line();
      std::string_view raw = m_text.substr(from, m_pos - from);
      if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
      // A shell starts a comment at '#' after a blank; "a#b" keeps its '#'.
      for (std::size_t i = 1; i < raw.size(); ++i) {
        if (raw[i] == '#' && blank(raw[i - 1])) {
          raw = raw.substr(0, i);
          break;
        }
      }
      while (!raw.empty() && blank(raw.back())) raw.remove_suffix(1);
      value = std::string(raw);
      next_line();
    }
    auto [it, fresh] = m_first_line.emplace(name, line);
    if (!fresh) {
      return fail(line, fmt::format("{} is set twice (first on line {}): which one the job sees "
                                    "depends on the tool that reads the file",
                                    name, it->second));
    }
    m_vars.emplace(std::move(name), std::move(value));
    return std::nullopt;
  }

  // A value that starts with a quote, as sh reads one word: '...' literal,
  // "..." where \ escapes $ ` " \ and a newline, bare characters between
  // quoted parts; it ends at a blank or the line's end outside quotes.
  // $VAR and $(...) are kept as text: the file is data, never run.
  std::optional<Error> shell_word(std::string& out) {
    while (m_pos < m_text.size() && !blank(m_text[m_pos]) && m_text[m_pos] != '\n' &&
           m_text[m_pos] != '\r') {
      char c = m_text[m_pos];
      std::size_t opened = m_line;
      if (c == '\'') {
        std::size_t close = m_text.find('\'', m_pos + 1);
        if (close == std::string_view::npos) return fail(opened, "unclosed ' quote");
        std::string_view part = m_text.substr(m_pos + 1, close - m_pos - 1);
        m_line += static_cast<std::size_t>(std::count(part.begin(), part.end(), '\n'));
        out += part;
        m_pos = close + 1;
      } else if (c == '"') {
        ++m_pos;
        while (true) {
          if (m_pos >= m_text.size()) return fail(opened, "unclosed \" quote");
          char d = m_text[m_pos];
          if (d == '"') {
            ++m_pos;
            break;
          }
          if (d == '\\' && m_pos + 1 < m_text.size() &&
              std::string_view("$`\"\\\n").find(m_text[m_pos + 1]) != std::string_view::npos) {
            if (m_text[m_pos + 1] == '\n') {
              ++m_line;  // a line continuation: both characters go
            } else {
              out += m_text[m_pos + 1];
            }
            m_pos += 2;
            continue;
          }
          if (d == '\n') ++m_line;
          out += d;
          ++m_pos;
        }
      } else if (c == '\\' && m_pos + 1 < m_text.size()) {
        if (m_text[m_pos + 1] == '\n') {
          ++m_line;
        } else {
          out += m_text[m_pos + 1];
        }
        m_pos += 2;
      } else {
        out += c;
        ++m_pos;
      }
    }
    return std::nullopt;
  }

  std::string_view m_text;
  const std::string& m_origin;
  std::size_t m_pos = 0;
  std::size_t m_line = 1;
  std::map<std::string, std::string, std::less<>> m_vars;
  std::map<std::string, std::size_t, std::less<>> m_first_line;
};

}  // namespace

Result<Env> Env::parse(std::string_view text, std::string origin) {
  Env env;
  env.m_origin = std::move(origin);
  auto vars = EnvParser(text, env.m_origin).run();
  if (!vars) return vars.error();
  env.m_vars = std::move(*vars);
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

Result<std::string> make_temp_file(const Env& env, std::string_view stem) {
  std::string dir = "/tmp";
  if (auto tmp = env.get_nonempty("TMPDIR");
      tmp && tmp->front() == '/' && tmp->find('%') == std::string::npos) {
    struct stat st {};
    if (::stat(tmp->c_str(), &st) == 0 && S_ISDIR(st.st_mode)) dir = *tmp;
  }
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::string name = fmt::format("{}/{}XXXXXX", dir == "/" ? "" : dir, stem);
  int fd = ::mkstemp(name.data());
  if (fd < 0) {
    return make_error(ErrorCode::permission, fmt::format("cannot create a temporary file in {}: {}",
                                                         dir, std::strerror(errno)));
  }
  ::close(fd);
  return name;
}

std::vector<std::string> split_path_list(std::string_view value) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= value.size() && out.size() < k_max_path_entries) {
    std::size_t next = value.find(':', pos);
    if (next == std::string_view::npos) next = value.size();
    if (next > pos) out.emplace_back(value.substr(pos, next - pos));
    pos = next + 1;
  }
  return out;
}

}  // namespace epkit::host
