// epkit env: the NCCL / NVSHMEM / DeepEP environment this node needs, in the
// format its launcher reads; --check compares a job's environment with it.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>

#include "checks/registry.h"
#include "checks/report_json.h"
#include "cli/command.h"
#include "cli/text_style.h"
#include "env/facts.h"
#include "env/format.h"
#include "env/job_env.h"
#include "env/lint.h"
#include "env/plan.h"
#include "topo/probe.h"
#include "util/json.h"

namespace epkit::cli {
namespace {

struct EnvOptions {
  CommonOptions common;
  std::string format;  // "" when not given: sh
  std::string profile = "auto";
  std::optional<int> local_rank;
  bool check = false;
};

// The node tree must be a readable folder: an unreadable one would probe as
// an empty node and give an empty environment without a word.
Result<void> check_sysroot(const std::string& sysroot) {
  if (sysroot == "/" || sysroot.empty()) return {};
  std::error_code ec;
  if (!std::filesystem::is_directory(sysroot, ec)) {
    return make_error(ErrorCode::invalid, fmt::format("--sysroot {}: not a folder", sysroot));
  }
  if (::access(sysroot.c_str(), R_OK | X_OK) != 0) {
    return make_error(ErrorCode::permission, fmt::format("--sysroot {}: not readable", sysroot));
  }
  std::string sys = sysroot + "/sys";
  if (!std::filesystem::is_directory(sys, ec) || ::access(sys.c_str(), R_OK | X_OK) != 0) {
    return make_error(
        ErrorCode::invalid,
        fmt::format("--sysroot {}: no readable sys/ folder: not a node tree", sysroot));
  }
  return {};
}

Result<host::Host> env_host(const EnvOptions& opts) {
  if (auto ok = check_sysroot(opts.common.sysroot); !ok) return ok.error();
  host::Env job = host::Env::from_process();
  if (!opts.common.env_file.empty()) {
    auto loaded = env::read_job_env(opts.common.env_file);
    if (!loaded) return loaded.error();
    job = std::move(*loaded);
  }
  return host::Host(host::Sysroot(opts.common.sysroot), std::move(job));
}

// INFO items (NCCL copes with the deviation) count as PASS for the exit code.
checks::Status item_status(const env::LintItem& item) {
  if (!item.handled.empty()) return checks::Status::pass;
  return item.enforced ? checks::Status::fail : checks::Status::warn;
}

std::string item_word(const env::LintItem& item) {
  return item.handled.empty() ? checks::to_string(item_status(item)) : "INFO";
}

// The doctor's env, nccl and nvshmem checks, less the two whose findings the
// diff already lists (env.plan, env.unknown-vars).
std::vector<std::string> doctor_ids() {
  std::vector<std::string> ids;
  for (const auto& check : checks::registry()) {
    auto group = checks::group_of(check.id);
    if (group != "env" && group != "nccl" && group != "nvshmem") continue;
    if (check.id == "env.plan" || check.id == "env.unknown-vars") continue;
    ids.emplace_back(check.id);
  }
  return ids;
}

int exit_of(checks::Status worst) {
  switch (worst) {
    case checks::Status::fail:
      return k_exit_fail;
    case checks::Status::warn:
      return k_exit_warn;
    case checks::Status::unknown:
      return k_exit_unknown;
    default:
      return k_exit_ok;
  }
}

int run_check(const EnvOptions& opts, const host::Host& host, const topo::Snapshot& snap,
              const env::Plan& plan, Io& io) {
  std::vector<env::LintItem> items = env::lint(plan, host.env(), snap);
  checks::Context ctx{host, snap};
  checks::Report report = checks::run(ctx, doctor_ids());
  checks::Status worst = report.worst;
  for (const auto& item : items) worst = checks::worse(worst, item_status(item));
  int code = exit_of(worst);

  if (opts.common.json) {
    nlohmann::ordered_json j;
    j["profile"] = env::to_string(plan.profile);
    j["profile_reason"] = plan.profile_why;
    j["environment"] = host.env().origin();
    j["diff"] = nlohmann::ordered_json::array();
    for (const auto& item : items) {
      j["diff"].push_back({{"name", item.name},
                           {"problem", env::to_string(item.problem)},
                           {"status", item_word(item)},
                           {"have", item.have},
                           {"want", item.want},
                           {"message", item.message},
                           {"fix", item.fix}});
    }
    j["checks"] = checks::to_json(report, ctx)["checks"];
    j["status"] = checks::to_string(worst);
    j["exit_code"] = code;
    io.out << util::dump_json(j, 2) << "\n";
    return code;
  }
  io.out << fmt::format("epkit env --check: {} against this node", host.env().origin());
  if (!host.live()) io.out << fmt::format(" (sysroot {})", host.fs().root());
  io.out << fmt::format("\nprofile {}: {}\n", env::to_string(plan.profile), plan.profile_why);
  io.out << fmt::format("\ndiff against `epkit env` ({} item{}):\n", items.size(),
                        items.size() == 1 ? "" : "s");
  for (const auto& item : items) {
    auto status = item_status(item);
    io.out << fmt::format("  {} {:<11} {}\n",
                          styled(io.color,
                                 status == checks::Status::fail   ? Style::red
                                 : status == checks::Status::warn ? Style::yellow
                                                                  : Style::dim,
                                 fmt::format("{:<4}", item_word(item))),
                          env::to_string(item.problem), item.message);
    if (item.handled.empty()) io.out << fmt::format("  {:<16} fix: {}\n", "", item.fix);
  }
  io.out << "\ndoctor checks (env, nccl, nvshmem):\n";
  for (const auto& run : report.runs) {
    const auto& o = run.outcome;
    io.out << fmt::format("  {:<7} {:<16} {}\n", checks::to_string(o.status), run.check->id,
                          o.summary);
    if (o.status == checks::Status::pass || o.status == checks::Status::skip) continue;
    if (!o.fix.empty()) io.out << fmt::format("  {:<24} fix: {}\n", "", o.fix);
  }
  io.out << fmt::format("\nexit {} ({})\n", code, code == 0 ? "OK" : checks::to_string(worst));
  return code;
}

}  // namespace

Command make_env_command() {
  return {"env", "Print the NCCL/NVSHMEM/DeepEP environment for this node; --check lints a job's",
          [](CLI::App& app) -> Runner {
            auto opts = std::make_shared<EnvOptions>();
            app.add_option("--format", opts->format, "sh (default), json, k8s, mpirun, dotenv")
                ->type_name("FORMAT");
            app.add_option("--profile", opts->profile,
                           "auto (default), gke-a4, gke-a3-ultra, ib, roce, nvlink-only")
                ->type_name("PROFILE");
            app.add_option("--local-rank", opts->local_rank,
                           "Give the per-rank values of this local rank (its GPU index)")
                ->type_name("N");
            app.add_flag("--check", opts->check,
                         "Compare the environment (or --env-file: env output, .env, k8s env: "
                         "YAML) with the generated one");
            add_json_flag(app, opts->common);
            add_sysroot_option(app, opts->common);
            app.add_option("--env-file", opts->common.env_file,
                           "The job's environment: `env` output, a .env file or a k8s env: list")
                ->type_name("FILE");
            app.footer(
                "Exit codes (--check): 0 OK, 1 WARN, 2 FAIL, 3 UNKNOWN; 64 bad usage or input.\n"
                "Rules and an example: docs/env.md.");
            return [opts](Io& io) -> int {
              auto chosen = choose_format(opts->common.json, opts->format, "sh");
              if (!chosen) {
                io.err << "epkit env: " << chosen.error().message << "\n";
                return k_exit_usage;
              }
              opts->common.json = *chosen == "json";  // --check's report too
              auto format = env::parse_format(*chosen);
              auto profile = env::parse_profile(opts->profile);
              for (const Error* e :
                   {format ? nullptr : &format.error(), profile ? nullptr : &profile.error()}) {
                if (e != nullptr) {
                  io.err << "epkit env: " << e->message << "\n";
                  return k_exit_usage;
                }
              }
              auto host = env_host(*opts);
              if (!host) {
                io.err << "epkit env: " << host.error().message << "\n";
                return k_exit_usage;
              }
              topo::Snapshot snap = topo::probe(*host);
              env::NodeFacts facts = env::read_facts(*host, snap);
              env::PlanOptions plan_options{*profile, std::nullopt};
              plan_options.local_rank = opts->local_rank;  // make_plan refuses one out of range
              auto plan = env::make_plan(facts, snap, plan_options);
              if (!plan) {
                io.err << "epkit env: " << plan.error().message << "\n";
                return k_exit_usage;
              }
              if (opts->check) return run_check(*opts, *host, snap, *plan, io);
              io.out << env::render(*plan, *format);
              return k_exit_ok;
            };
          }};
}

}  // namespace epkit::cli
