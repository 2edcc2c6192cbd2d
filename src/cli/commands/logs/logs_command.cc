// epkit logs: read NCCL / NVSHMEM / DeepEP / PyTorch logs from many ranks and
// report per-rank facts, communicators and findings. Exit code by the worst
// finding: 0 none or info, 1 warn, 2 error; 64 bad flags or unreadable input.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/command.h"
#include "cli/text_style.h"
#include "logs/analyzer.h"
#include "logs/catalogue.h"
#include "logs/report_json.h"

namespace epkit::cli {
namespace {

struct LogsOptions {
  CommonOptions common;
  std::vector<std::string> inputs;
  std::string slice;
  bool list = false;
  bool rules = false;
};

std::string join_names(const std::vector<std::string>& v, std::size_t max) {
  std::string out;
  for (std::size_t i = 0; i < v.size() && i < max; ++i) out += (i ? ", " : "") + v[i];
  if (v.size() > max) out += fmt::format(", +{} more", v.size() - max);
  return out;
}

std::string interface_names(const std::vector<logs::Interface>& ifs) {
  std::string out;
  for (const auto& i : ifs) out += (out.empty() ? "" : " ") + i.name;
  return out;
}

std::string counts_text(const std::vector<logs::Count>& counts) {
  std::string out;
  for (const auto& c : logs::sorted_counts(counts))
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", c.name, c.count);
  return out;
}

std::string gdr_text(const logs::RankFacts& r) {
  std::string out;
  if (!r.gdr_enabled.empty())
    out = fmt::format("enabled for {} HCA{}", r.gdr_enabled.size(),
                      r.gdr_enabled.size() == 1 ? "" : "s");
  if (!r.gdr_disabled.empty()) {
    out +=
        fmt::format("{}disabled for {}", out.empty() ? "" : "; ", fmt::join(r.gdr_disabled, " "));
  }
  if (r.gdr_distance_disabled > 0) {
    out += fmt::format("{}{} GPU/NIC pair{} beyond NCCL_NET_GDR_LEVEL", out.empty() ? "" : "; ",
                       r.gdr_distance_disabled, r.gdr_distance_disabled == 1 ? "" : "s");
  }
  return out;
}

struct Fact {
  std::string_view name;
  std::string (*value)(const logs::RankFacts&);
};

// Facts ranks of one job should share; per-rank identity (host, pid, GPU) is
// summarised separately. Interface addresses differ per node, so only names
// are compared.
const Fact k_facts[] = {
    {"NCCL version", [](const logs::RankFacts& r) { return r.nccl_version; }},
    {"network", [](const logs::RankFacts& r) { return r.network; }},
    {"NET devices",
     [](const logs::RankFacts& r) {
       return r.net_name.empty()
                  ? std::string()
                  : fmt::format("NET/{} {}", r.net_name, fmt::join(r.net_devices, " "));
     }},
    {"OOB interface", [](const logs::RankFacts& r) { return interface_names(r.oob); }},
    {"bootstrap", [](const logs::RankFacts& r) { return interface_names(r.bootstrap); }},
    {"GPU Direct RDMA", &gdr_text},
    {"transports",
     [](const logs::RankFacts& r) {
       std::vector<std::string> names;
       for (const auto& c : logs::sorted_counts(r.transports)) names.push_back(c.name);
       return join_names(names, 8);
     }},
    {"collectives", [](const logs::RankFacts& r) { return counts_text(r.collectives); }},
};

// "gpu-node-02 (all 8)" when every rank of a host is in the list, else labels.
std::string who_text(const std::vector<const logs::RankFacts*>& members,
                     const std::map<std::string, int>& per_host) {
  std::map<std::string, std::vector<std::string>> by_host;
  for (const auto* r : members) by_host[r->host].push_back(r->label);
  std::vector<std::string> parts;
  for (const auto& [host, labels] : by_host) {
    auto total = per_host.find(host);
    if (!host.empty() && total != per_host.end() && labels.size() > 1 &&
        static_cast<int>(labels.size()) == total->second) {
      parts.push_back(fmt::format("{} (all {})", host, labels.size()));
    } else {
      parts.insert(parts.end(), labels.begin(), labels.end());
    }
  }
  return join_names(parts, 4);
}

void print_fact_row(std::string_view name, const std::string& value, const std::string& who,
                    Style style, Io& io) {
  constexpr std::size_t k_width = 52;
  std::string shown = styled(io.color, style, value);
  if (value.size() <= k_width) {
    io.out << fmt::format("  {:<16} {}{} {}\n", name, shown,
                          std::string(k_width - value.size(), ' '), who);
  } else {
    io.out << fmt::format("  {:<16} {}\n  {:<16} {:>{}} {}\n", name, shown, "", "", k_width, who);
  }
}

// One row per group of hosts that run the same ranks layout, e.g.
// "8 ranks, GPUs 0-7   gpu-node-01, gpu-node-02".
void print_hosts(const std::vector<logs::RankFacts>& ranks, Io& io) {
  std::map<std::string, std::vector<int>> gpus_by_host;
  for (const auto& r : ranks) {
    if (!r.host.empty()) gpus_by_host[r.host].push_back(r.cuda_dev);
  }
  std::map<std::string, std::vector<std::string>> hosts_by_layout;
  for (auto& [host, gpus] : gpus_by_host) {
    std::sort(gpus.begin(), gpus.end());
    std::string layout = fmt::format("{} rank{}", gpus.size(), gpus.size() == 1 ? "" : "s");
    bool contiguous = gpus.front() >= 0;
    for (std::size_t i = 1; i < gpus.size(); ++i)
      contiguous = contiguous && gpus[i] == gpus[i - 1] + 1;
    if (contiguous && gpus.size() > 1) {
      layout += fmt::format(", GPUs {}-{}", gpus.front(), gpus.back());
    } else if (gpus.front() >= 0) {
      layout += fmt::format(", GPU{} {}", gpus.size() == 1 ? "" : "s", fmt::join(gpus, ","));
    }
    hosts_by_layout[layout].push_back(host);
  }
  bool first = true;
  for (const auto& [layout, hosts] : hosts_by_layout) {
    print_fact_row(first ? "hosts" : "", layout, join_names(hosts, 4), Style::plain, io);
    first = false;
  }
}

void print_facts(const logs::Report& report, Io& io) {
  const auto& ranks = report.ranks;
  std::map<std::string, int> hosts;
  for (const auto& r : ranks) ++hosts[r.host];
  std::size_t named_hosts = hosts.size() - hosts.count("");  // launcher-only ranks have no host
  io.out << "\n"
         << styled(io.color, Style::bold,
                   fmt::format("Ranks ({} on {} host{})", ranks.size(), named_hosts,
                               named_hosts == 1 ? "" : "s"))
         << "\n";
  if (ranks.empty()) {
    io.out << "  no line names its rank (host:pid:tid [dev] NCCL ..., or a launcher prefix such "
              "as [rankN]:, N: or [1,N]<stdout>:); findings show rank ?\n";
  } else {
    print_hosts(ranks, io);
  }
  for (const auto& fact : k_facts) {
    std::map<std::string, std::vector<const logs::RankFacts*>> groups;
    std::vector<const logs::RankFacts*> silent;
    for (const auto& r : ranks) {
      std::string v = fact.value(r);
      if (v.empty()) {
        silent.push_back(&r);
      } else {
        groups[v].push_back(&r);
      }
    }
    if (groups.empty()) continue;
    const std::string* majority = nullptr;
    std::size_t best = 0;
    for (const auto& [v, members] : groups) {
      if (members.size() > best) best = members.size(), majority = &v;
    }
    const auto& main_group = groups[*majority];
    print_fact_row(fact.name, *majority,
                   main_group.size() == ranks.size()
                       ? fmt::format("all {}", ranks.size())
                       : fmt::format("{} of {}", main_group.size(), ranks.size()),
                   Style::plain, io);
    for (const auto& [v, members] : groups) {
      if (&v != majority) print_fact_row("", v, who_text(members, hosts), Style::yellow, io);
    }
    if (!silent.empty())
      print_fact_row("", "(not in the log)", who_text(silent, hosts), Style::dim, io);
  }
}

// Facts read from lines that name no rank (an excerpt pasted from a chat or
// an issue): shown on their own, never folded into the per-rank counts.
void print_unranked(const logs::Report& report, Io& io) {
  bool any = false;
  for (const auto& fact : k_facts) {
    std::string v = fact.value(report.unranked);
    if (v.empty()) continue;
    if (!any) {
      io.out << "\n"
             << styled(
                    io.color, Style::bold,
                    fmt::format("Lines without a rank ({} lines, rank ?)", report.unranked.lines))
             << "\n";
      any = true;
    }
    print_fact_row(fact.name, v, "rank ?", Style::plain, io);
  }
}

// Hosts named by lines without a rank (kubectl pod prefixes, NCCL prefixes
// of other ranks' lines, an mpirun -H list) and the launch command lines.
void print_hosts_and_launches(const logs::Report& report, Io& io) {
  std::vector<std::string> unseen;  // hosts with no rank in the table
  for (const auto& h : report.hosts) {
    bool has_rank = std::any_of(report.ranks.begin(), report.ranks.end(),
                                [&](const logs::RankFacts& r) { return r.host == h.name; });
    if (!has_rank) unseen.push_back(h.name);
  }
  if (unseen.empty() && report.launches.empty()) return;
  io.out << "\n" << styled(io.color, Style::bold, "Hosts and launch") << "\n";
  if (!unseen.empty()) {
    print_fact_row("hosts", fmt::format("{} named without a rank", unseen.size()),
                   join_names(unseen, 6), Style::plain, io);
  }
  for (const auto& l : report.launches) {
    io.out << fmt::format("  {:<16} {}\n", "launch", l.command);
    if (!l.hosts.empty())
      io.out << fmt::format("  {:<16} {}\n", "", "hosts " + join_names(l.hosts, 8));
    if (!l.env.empty()) io.out << fmt::format("  {:<16} {}\n", "", join_names(l.env, 8));
  }
}

void print_not_logs(const logs::Report& report, Io& io) {
  if (report.not_logs.empty()) return;
  io.out << "\n"
         << styled(io.color, Style::bold,
                   fmt::format("Not logs ({} of {} inputs)", report.not_logs.size(),
                               report.files.size()))
         << "\n";
  for (const auto& n : report.not_logs) io.out << "  " << n.reason << "\n";
}

void print_comms(const logs::Report& report, Io& io) {
  if (report.communicators.empty()) return;
  io.out << "\n" << styled(io.color, Style::bold, "Communicators") << "\n";
  io.out << fmt::format("  {:<20} {:>6}  {}\n", "commId", "nranks", "Init COMPLETE");
  std::size_t shown = 0;
  for (const auto& c : report.communicators) {
    bool ok = c.complete_count == c.nranks;
    if (++shown > 20 && ok) continue;  // always list the incomplete ones
    io.out << fmt::format("  {:<20} {:>6}  {}\n", c.comm_id, c.nranks,
                          styled(io.color, ok ? Style::green : Style::red,
                                 fmt::format("{}/{}", c.complete_count, c.nranks)));
  }
  if (shown > 20)
    io.out << fmt::format("  ... {} communicators in all\n", report.communicators.size());
}

void print_slices(const logs::Report& report, Io& io) {
  if (!report.sliced) return;
  io.out << "\n"
         << styled(io.color, Style::bold, fmt::format("Slices ({})", report.slices.size())) << "\n";
  for (std::size_t i = 0; i < report.slices.size(); ++i) {
    const auto& s = report.slices[i];
    std::string counts = counts_text(s.collectives);
    io.out << fmt::format("  {:>4}  {:<40} {}\n", i,
                          s.marker.empty() ? "(before the first marker)" : s.marker.substr(0, 40),
                          counts.empty() ? "no collectives" : counts);
  }
}

Style severity_style(logs::Severity s) {
  switch (s) {
    case logs::Severity::info:
      return Style::cyan;
    case logs::Severity::warn:
      return Style::yellow;
    case logs::Severity::error:
      return Style::red;
  }
  return Style::plain;
}

void print_findings(const logs::Report& report, Io& io) {
  io.out << "\n" << styled(io.color, Style::bold, "Findings") << "\n";
  if (report.findings.empty()) {
    io.out << "  none\n";
    return;
  }
  for (const auto& f : report.findings) {
    std::string sev = fmt::format("{:<5}", to_string(f.spec->severity));
    for (char& c : sev) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    io.out << fmt::format("  {} {}  {}", styled(io.color, severity_style(f.spec->severity), sev),
                          styled(io.color, Style::bold, std::string(f.spec->id)), f.spec->title);
    std::string who;
    if (!f.hosts.empty()) {
      who = f.count == 1 ? std::string("1 host differs") : fmt::format("{} hosts differ", f.count);
    } else {
      who = fmt::format("{} time{}", f.count, f.count == 1 ? "" : "s");
      if (f.rank_count > 0)
        who += fmt::format(", {} rank{}", f.rank_count, f.rank_count == 1 ? "" : "s");
      if (f.unranked > 0) who += ", rank ?";
    }
    io.out << styled(io.color, Style::dim, fmt::format("  ({})", who)) << "\n";
    for (const auto& d : f.details) io.out << fmt::format("{:>16} {}\n", "detail", d);
    for (std::size_t i = 0; i < f.evidence.size(); ++i) {
      const auto& e = f.evidence[i];
      io.out << fmt::format("{:>16} {}:{}: {}\n", i == 0 ? "evidence" : "", e.file, e.line, e.text);
    }
    std::string ranks = join_names(f.ranks, 8);
    if (f.unranked > 0) {
      ranks += fmt::format("{}? (rank unknown: {} line{} without a rank prefix)",
                           ranks.empty() ? "" : ", ", f.unranked, f.unranked == 1 ? "" : "s");
    }
    if (!ranks.empty()) io.out << fmt::format("{:>16} {}\n", "ranks", ranks);
    if (!f.hosts.empty()) io.out << fmt::format("{:>16} {}\n", "hosts", join_names(f.hosts, 8));
    io.out << fmt::format("{:>16} {}\n", "cause", f.spec->cause);
    if (!f.look_for.empty()) io.out << fmt::format("{:>16} {}\n", "look for", f.look_for);
    io.out << fmt::format("{:>16} {}\n", "fix", f.spec->fix);
    if (!f.spec->doctor_check.empty()) {
      io.out << fmt::format("{:>16} epkit doctor --only {}\n", "doctor check",
                            f.spec->doctor_check);
    }
  }
}

void print_text(const logs::Report& report, double seconds, Io& io) {
  double mb = static_cast<double>(report.bytes) / 1e6;
  io.out << fmt::format("epkit logs: {} file{}, {} lines, {:.1f} MB in {:.2f} s ({:.0f} MB/s)\n",
                        report.files.size(), report.files.size() == 1 ? "" : "s", report.lines, mb,
                        seconds, seconds > 0 ? mb / seconds : 0.0);
  print_not_logs(report, io);
  if (report.no_log_at_all()) {
    io.out << fmt::format("\nsummary: no log in the input; exit {}\n", report.exit_code());
    return;
  }
  print_facts(report, io);
  print_unranked(report, io);
  print_hosts_and_launches(report, io);
  print_comms(report, io);
  print_slices(report, io);
  print_findings(report, io);
  int counts[3] = {};
  for (const auto& f : report.findings) ++counts[static_cast<int>(f.spec->severity)];
  io.out << fmt::format("\nsummary: {} error, {} warn, {} info; exit {}\n", counts[2], counts[1],
                        counts[0], report.exit_code());
}

void print_rules(Io& io) {
  for (const auto& r : logs::rule_table()) {
    io.out << fmt::format(
        "{:<24} {:<5} {}{}\n", r.id, to_string(r.severity), r.title,
        r.doctor_check.empty() ? "" : fmt::format(" [doctor: {}]", r.doctor_check));
  }
}

// "2.12" < "2.28" < "3.0": the mined versions compared as numbers.
bool older_version(std::string_view a, std::string_view b) {
  auto parts = [](std::string_view v) {
    std::vector<int> out;
    int n = 0;
    bool digit = false;
    for (char c : v) {
      if (c >= '0' && c <= '9') {
        n = n * 10 + (c - '0');
        digit = true;
      } else if (digit) {
        out.push_back(n);
        n = 0;
        digit = false;
      }
    }
    if (digit) out.push_back(n);
    return out;
  };
  return parts(a) < parts(b);
}

// "NCCL 2.12-2.28": the range of versions the sites of a source were mined
// from, read from the data so the sentence stays true after re-mining.
std::string mined_range(logs::Source source, std::string_view name) {
  std::string_view first, last;
  for (const logs::Site& site : logs::catalogue_sites()) {
    if (site.source != source) continue;
    if (first.empty() || older_version(site.first, first)) first = site.first;
    if (last.empty() || older_version(last, site.last)) last = site.last;
  }
  return fmt::format("{} {}-{}", name, first, last);
}

// The catalogue's families: what `epkit logs` recognises by wording, with
// how many mined wordings (sites) each holds and from which versions.
void print_families(Io& io) {
  auto families = logs::catalogue_families();
  auto sites = logs::catalogue_sites();
  std::vector<std::size_t> count(families.size(), 0);
  std::vector<std::string> versions(families.size());
  std::size_t named = 0, matchable = 0;
  for (std::size_t i = 0; i < sites.size(); ++i) {
    if (!logs::site_is_matchable(i)) continue;
    ++matchable;
    int f = logs::family_of_site(i);
    if (f < 0) continue;
    ++named;
    ++count[static_cast<std::size_t>(f)];
  }
  constexpr std::string_view k_source[] = {"NCCL", "NVSHMEM", "DeepEP"};
  for (std::size_t f = 0; f < families.size(); ++f) {
    const auto& fam = families[f];
    const logs::RuleSpec& spec = logs::family_spec(f);
    io.out << fmt::format(
        "{:<30} {:<5} {:<7} {:>4} wording{}  {}{}\n", fam.id, to_string(spec.severity),
        k_source[static_cast<int>(fam.source)], count[f], count[f] == 1 ? " " : "s", spec.title,
        spec.doctor_check.empty() ? "" : fmt::format(" [doctor: {}]", spec.doctor_check));
  }
  io.out << fmt::format(
      "\n{} families; {} of {} recognisable WARN/ERROR wordings mined from {}, {} and DeepEP "
      "V1/V2 belong to a named family ({} too generic to recognise, e.g. \"%s\").\n",
      families.size(), named, matchable, mined_range(logs::Source::nccl, "NCCL"),
      mined_range(logs::Source::nvshmem, "NVSHMEM"), sites.size() - matchable);
}

}  // namespace

Command make_logs_command() {
  return {
      "logs", "Diagnose NCCL, NVSHMEM and DeepEP logs from one or many ranks",
      [](CLI::App& app) -> Runner {
        auto opts = std::make_shared<LogsOptions>();
        add_json_flag(app, opts->common);
        app.add_option(
               "inputs", opts->inputs,
               "Log files, folders (read recursively), globs, or - for stdin; gzip is read as is")
            ->type_name("PATH...");
        app.add_option(
               "--slice", opts->slice,
               "Count collectives per slice between lines matching REGEX (e.g. 'iteration: ')")
            ->type_name("REGEX");
        app.add_flag("--list", opts->list, "List the finding ids and exit");
        app.add_flag("--rules", opts->rules,
                     "List the catalogue's failure families (NCCL, NVSHMEM, DeepEP) and exit");
        app.footer(
            "Exit codes: 0 no finding or info only, 1 warn, 2 error; 64 bad flags, unreadable "
            "input, or no input holding a log (empty, binary, no NCCL/NVSHMEM/DeepEP line).\n"
            "Details and the JSON schema: docs/logs.md.");
        return [opts](Io& io) -> int {
          if (opts->list) {
            print_rules(io);
            return k_exit_ok;
          }
          if (opts->rules) {
            print_families(io);
            return k_exit_ok;
          }
          if (opts->inputs.empty()) {
            io.err << "epkit logs: name at least one log file, folder or glob ('-' for stdin)\n";
            return k_exit_usage;
          }
          logs::Options options;
          options.slice_regex = opts->slice;
          auto start = std::chrono::steady_clock::now();
          auto report = logs::analyze_inputs(opts->inputs, options);
          if (!report) {
            io.err << "epkit logs: " << report.error().message << "\n";
            return k_exit_usage;
          }
          double seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          if (opts->common.json) {
            io.out << logs::to_json(*report).dump(2, ' ', false,
                                                  nlohmann::json::error_handler_t::replace)
                   << "\n";
          } else {
            print_text(*report, seconds, io);
          }
          // A scheduler acts on the exit code: 64 says the input was wrong
          // (nothing to diagnose), never a silent pass.
          if (report->no_log_at_all()) {
            for (const auto& n : report->not_logs) io.err << "epkit logs: " << n.reason << "\n";
          }
          return report->exit_code();
        };
      }};
}

}  // namespace epkit::cli
