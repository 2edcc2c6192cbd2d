#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <vector>

#include "cli/command.h"
#include "cli/text_style.h"
#include "util/text.h"

namespace epkit::cli {
namespace {

std::vector<Command> all_commands() {
  return {
#define EPKIT_COMMAND(name) make_##name##_command(),
#include "epkit_commands.inc"
#undef EPKIT_COMMAND
  };
}

}  // namespace

CLI::Validator finite_range(double min, double max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value) || !std::isfinite(value)) {
          return fmt::format("'{}' is not a finite number", text);
        }
        if (value < min || value > max) {
          return fmt::format("{} is not in the range [{} - {}]", text, min, max);
        }
        return {};
      },
      fmt::format("FLOAT in [{} - {}]", min, max));
}

Result<std::string> choose_format(bool json, const std::string& format, std::string_view fallback) {
  if (json && !format.empty() && format != "json") {
    return make_error(ErrorCode::invalid,
                      fmt::format("--json and --format {} ask for two formats; give one", format));
  }
  if (json) return std::string("json");
  return format.empty() ? std::string(fallback) : format;
}

void add_json_flag(CLI::App& app, CommonOptions& opts) {
  app.add_flag("--json", opts.json, "Print JSON instead of text");
}

void add_sysroot_option(CLI::App& app, CommonOptions& opts) {
  app.add_option("--sysroot", opts.sysroot,
                 "Read /sys, /proc, /dev, /etc and libraries under DIR (a node's tree)")
      ->type_name("DIR");
}

void add_env_file_option(CLI::App& app, CommonOptions& opts) {
  app.add_option("--env-file", opts.env_file,
                 "Take the environment from FILE (KEY=VALUE lines, as `env` prints)")
      ->type_name("FILE");
}

Result<host::Host> make_host(const CommonOptions& opts) {
  std::error_code ec;
  if (opts.sysroot != "/" && !std::filesystem::is_directory(opts.sysroot, ec)) {
    return make_error(ErrorCode::invalid, fmt::format("--sysroot {}: not a folder", opts.sysroot));
  }
  host::Env env = host::Env::from_process();
  if (!opts.env_file.empty()) {
    auto loaded = host::Env::from_file(opts.env_file);
    if (!loaded) return make_error(ErrorCode::invalid, loaded.error().message);
    env = std::move(*loaded);
  }
  return host::Host(host::Sysroot(opts.sysroot), std::move(env));
}

namespace {

int run_parsed(int argc, const char* const* argv, Io& io) {
  auto commands = all_commands();
  CLI::App app{
      "epkit: expert-parallel communication for GPU clusters, and the tools to make it work",
      "epkit"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", fmt::format("epkit {}", EPKIT_VERSION));
  bool list = false;
  app.add_flag("--list-commands", list, "List the commands");

  Runner runner;
  for (auto& command : commands) {
    CLI::App* sub = app.add_subcommand(std::string(command.name), std::string(command.summary));
    auto run = command.setup(*sub);
    sub->final_callback([&runner, run] { runner = run; });
  }

  // An unknown first word gets a did-you-mean before CLI11's generic message.
  if (argc > 1 && argv[1][0] != '-') {
    std::string_view word = argv[1];
    bool known = std::any_of(commands.begin(), commands.end(),
                             [&](const Command& c) { return c.name == word; });
    if (!known) {
      io.err << fmt::format("epkit: '{}' is not a command.", word);
      const Command* best = nullptr;
      std::size_t best_d = 3;
      for (const auto& c : commands) {
        std::size_t d = util::edit_distance(word, c.name);
        if (d < best_d) best = &c, best_d = d;
      }
      if (best != nullptr) io.err << fmt::format(" Did you mean '{}'?", best->name);
      io.err << " See 'epkit --help'.\n";
      return k_exit_usage;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    io.out << app.help();  // delegates to the selected subcommand
    return k_exit_ok;
  } catch (const CLI::CallForAllHelp&) {
    io.out << app.help("", CLI::AppFormatMode::All);
    return k_exit_ok;
  } catch (const CLI::CallForVersion& e) {
    io.out << e.what() << "\n";
    return k_exit_ok;
  } catch (const CLI::ParseError& e) {
    io.err << "epkit: " << e.what() << "\n";
    return k_exit_usage;
  }
  if (list) {
    for (const auto& c : commands) io.out << fmt::format("  {:<10} {}\n", c.name, c.summary);
    return k_exit_ok;
  }
  if (!runner) {
    io.out << app.help();
    return k_exit_usage;
  }
  return runner(io);
}

}  // namespace

int run_cli(int argc, const char* const* argv, Io& raw) {
  TerminalSafeBuf out_buf(raw.out, raw.color);
  TerminalSafeBuf err_buf(raw.err, raw.color);
  std::ostream out(&out_buf);
  std::ostream err(&err_buf);
  Io io{out, err, raw.color};
  int code = k_exit_internal;
  try {
    code = run_parsed(argc, argv, io);
  } catch (const std::exception& e) {
    out.flush();
    err << "epkit: internal error: " << e.what() << "\n";
  } catch (...) {
    out.flush();
    err << "epkit: internal error: unknown exception\n";
  }
  out.flush();
  err.flush();
  return code;
}

}  // namespace epkit::cli
