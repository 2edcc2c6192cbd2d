// A subcommand: one folder under cli/commands/<name>/ defining
// make_<name>_command(). CMake lists the folders in epkit_commands.inc.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>

#include "host/host.h"

namespace epkit::cli {

/// Exit codes shared by every command (the doctor's 0-3 follow Nagios).
enum ExitCode : int {
  k_exit_ok = 0,
  k_exit_warn = 1,
  k_exit_fail = 2,
  k_exit_unknown = 3,
  k_exit_usage = 64,     // EX_USAGE: bad flags or input files
  k_exit_internal = 70,  // EX_SOFTWARE: a bug in epkit ("internal error: ...")
  k_exit_interrupted = 130,
};

struct Io {
  std::ostream& out;
  std::ostream& err;
  bool color = false;  // out is a terminal and NO_COLOR is unset
};

/// Options several commands share; each command adds the ones it takes.
struct CommonOptions {
  bool json = false;
  std::string sysroot = "/";
  std::string env_file;
};

/// CLI::Range for a double that also refuses NaN and infinities (CLI::Range
/// compares with < and >, which NaN passes).
CLI::Validator finite_range(double min, double max);

void add_json_flag(CLI::App& app, CommonOptions& opts);
/// The one rule for commands with both --json and --format: --json is
/// --format json; --json with another --format is a usage error; neither
/// gives `fallback`. `format` is "" when --format was not given.
Result<std::string> choose_format(bool json, const std::string& format, std::string_view fallback);
void add_sysroot_option(CLI::App& app, CommonOptions& opts);
void add_env_file_option(CLI::App& app, CommonOptions& opts);
/// The Host the options describe; an unreadable --env-file or a --sysroot that
/// is not a folder is an invalid error.
Result<host::Host> make_host(const CommonOptions& opts);

using Runner = std::function<int(Io&)>;

struct Command {
  std::string_view name;
  std::string_view summary;
  /// Adds the subcommand's options to `app`; returns the function that runs it
  /// once the command line is parsed. Option storage lives in the closure.
  std::function<Runner(CLI::App& app)> setup;
};

#define EPKIT_COMMAND(name) Command make_##name##_command();
#include "epkit_commands.inc"
#undef EPKIT_COMMAND

/// The CLI as a function: argv in, exit code out (tests call it directly).
/// Everything written to io.out and io.err passes util::terminal_safe; an
/// exception that escapes a command is "internal error: ..." and
/// k_exit_internal, never an abort.
int run_cli(int argc, const char* const* argv, Io& io);

}  // namespace epkit::cli
