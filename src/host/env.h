// Env: the one view of the environment that checks and the runtime read.
//
// It is the process environment by default, or a file of KEY=VALUE lines as
// `env` prints them (--env-file), so that a pod's or job's environment can be
// checked from anywhere.
#pragma once

#include <epkit/result.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace epkit::host {

class Env {
 public:
  Env() = default;
  explicit Env(std::map<std::string, std::string> vars, std::string origin = "test");

  static Env from_process();
  /// KEY=VALUE lines; a leading "export " is accepted, '#' lines and blank
  /// lines are skipped, a line with no '=' continues the previous value (env
  /// prints multi-line values that way). A line that cannot be read is an
  /// invalid error naming file:line.
  static Result<Env> from_file(const std::string& path);
  static Result<Env> parse(std::string_view text, std::string origin);

  std::optional<std::string> get(std::string_view name) const;
  /// get() treating an empty value as unset, as NCCL and NVSHMEM do.
  std::optional<std::string> get_nonempty(std::string_view name) const;
  bool has(std::string_view name) const { return get(name).has_value(); }
  const std::map<std::string, std::string, std::less<>>& all() const { return m_vars; }
  /// Where the values came from: "process environment" or the file's path.
  const std::string& origin() const { return m_origin; }

  /// Names starting with prefix, sorted.
  std::vector<std::string> names_with_prefix(std::string_view prefix) const;

  void set(std::string name, std::string value) { m_vars[std::move(name)] = std::move(value); }
  void unset(std::string_view name);

 private:
  std::map<std::string, std::string, std::less<>> m_vars;
  std::string m_origin = "process environment";
};

/// Splits a PATH-like list on ':' dropping empty entries.
std::vector<std::string> split_path_list(std::string_view value);

}  // namespace epkit::host
