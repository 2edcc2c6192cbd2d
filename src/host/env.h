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
  /// KEY=VALUE lines as `env` prints them or a .env / shell file holds them
  /// (docs/env.md, "The env file"): a leading `export` is accepted; '#' lines,
  /// blank lines and a trailing " # comment" are skipped; a value that starts
  /// with a quote is read as a shell reads it ('...' literal, "..." with backslash
  /// escapes, either may span lines); an unquoted value is taken as it
  /// stands. A line that is no assignment, a name set twice, an unclosed
  /// quote or a NUL byte is an invalid error naming file:line.
  /// Only a regular file of at most k_max_file_bytes is read.
  static Result<Env> from_file(const std::string& path);
  static Result<Env> parse(std::string_view text, std::string origin);

  /// The largest --env-file read (a job's whole `env` is a few tens of KiB).
  static constexpr std::size_t k_max_file_bytes = 4 << 20;

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

/// Sets `name` in this process's environment, for a library that reads its
/// settings from there itself (NCCL: NCCL_DEBUG*, NCCL_HOSTID) rather than
/// from an Env. Every write to the process environment goes through here, as
/// every read goes through Env::from_process; an internal error naming the
/// variable when setenv refuses (a name with '=', out of memory).
Result<void> set_process_env(const std::string& name, const std::string& value);

/// The text of an env file: a regular file of at most Env::k_max_file_bytes
/// (a folder, fifo or device is an invalid error naming it).
Result<std::string> read_env_file(const std::string& path);

/// A new empty file for this process's own use: mkstemp (a unique name, mode
/// 0600) in $TMPDIR when it names a folder by an absolute path, else /tmp.
/// `stem` starts the name ("epkit-nccl-3-" -> "/tmp/epkit-nccl-3-Ab12Cd").
/// The name never holds '%' (NCCL_DEBUG_FILE expands %h and %p).
Result<std::string> make_temp_file(const Env& env, std::string_view stem);

/// The entries of a path list epkit looks at: every check stats each one, and
/// a 4 MiB LD_LIBRARY_PATH of 400,000 entries from an env file took minutes.
/// No real job comes near it.
constexpr std::size_t k_max_path_entries = 1024;

/// Splits a PATH-like list on ':' dropping empty entries; the first
/// k_max_path_entries only.
std::vector<std::string> split_path_list(std::string_view value);

}  // namespace epkit::host
