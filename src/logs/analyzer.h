// The log analyser: lines in, per-rank facts, communicators and findings out.
//
// Memory is bounded by the number of ranks (and communicators), never by the
// input size: per rank it keeps a few strings and counters; per finding the
// first k_max_evidence lines. Lines themselves are never kept.
#pragma once

#include <re2/re2.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "epkit/result.h"
#include "logs/catalogue.h"
#include "logs/findings.h"
#include "logs/line_parser.h"

namespace epkit::logs {

inline constexpr std::size_t k_max_ranks = 1 << 16;
inline constexpr std::size_t k_max_names = 32;  // collective / transport kinds per rank
inline constexpr std::size_t k_max_slices = 4096;
inline constexpr std::size_t k_max_hosts = 4096;
inline constexpr std::size_t k_max_launches = 8;

struct Count {
  std::string name;
  std::uint64_t count = 0;
};

struct Interface {
  std::string name;
  std::string address;
};

struct RankFacts {
  std::string label;  // "host:pid", or "rank N" from a launcher prefix only
  std::string host;
  std::int64_t pid = -1;
  int cuda_dev = -1;
  int launcher_rank = -1;
  std::string nccl_version;
  std::string network;                   // "Using network <X>"
  std::string net_name;                  // the X of the last "NET/X : Using" line
  std::vector<std::string> net_devices;  // "mlx5_0:1/RoCE", or interface names for sockets
  std::vector<Interface> oob;
  std::vector<Interface> bootstrap;
  std::vector<std::string> gdr_enabled;     // HCA names
  std::vector<std::string> gdr_disabled;    // HCA names (no peer memory / DMA-BUF)
  std::uint64_t gdr_distance_disabled = 0;  // GPU/NIC pairs disabled by policy
  std::vector<Count> transports;            // channel transports, e.g. "NET/IB/GDRDMA"
  std::vector<Count> collectives;           // COLL lines per type
  std::uint64_t lines = 0;
  Evidence version_at;  // where nccl_version / network / devices were read
  Evidence network_at;
  Evidence devices_at;
  bool nvshmem = false;  // printed NVSHMEM lines
};

// Facts per host, from every line that names a host (an NCCL prefix or a
// kubectl pod prefix), with or without a rank: hosts must agree on these.
struct HostFacts {
  std::string name;
  std::string nccl_version;
  std::string network;      // "Using network <X>"
  std::string net_devices;  // "NET/IB 4": the plugin and its device count
  std::string plugin;       // "external <name>", "internal (none found)" or "none initialised"
  std::string plugin_path;  // the library loaded or tried
  Evidence version_at;
  Evidence network_at;
  Evidence devices_at;
  Evidence plugin_at;
  Evidence path_at;
};

// Why an input holds no log (Report::not_logs).
enum class NotLog { empty, binary, no_log_lines };

struct NotLogFile {
  std::string file;
  NotLog kind = NotLog::empty;
  std::string reason;  // one sentence naming the file
};

// A launcher command line found in the input (mpirun/mpiexec ... -H a,b).
struct Launch {
  std::string command;             // printable, cut
  std::vector<std::string> hosts;  // from -H / --host / -host
  std::vector<std::string> env;    // -x NAME=VALUE for NCCL_*, NVSHMEM_*, UCX_*
  Evidence at;
};

struct Communicator {
  std::string comm_id;
  int nranks = 0;
  std::vector<int> owner;           // NCCL rank -> index in Report::ranks, -1 if never seen
  std::vector<bool> unranked_seen;  // a line without a rank prefix named this NCCL rank
  std::vector<bool> complete;
  int complete_count = 0;
  std::unordered_map<int, Evidence> pending;  // Init START lines of ranks not yet complete
  Evidence first_at;
};

struct Slice {
  std::string marker;  // the marker line that opened it ("" for the part before the first)
  std::vector<Count> collectives;
};

struct Report {
  std::vector<std::string> files;
  std::uint64_t bytes = 0;
  std::uint64_t lines = 0;
  std::vector<RankFacts> ranks;
  RankFacts unranked;  // facts of lines that name no rank (pasted excerpts); label "?"
  std::vector<HostFacts> hosts;
  std::vector<Launch> launches;
  std::vector<NotLogFile> not_logs;      // inputs without a single log line
  std::uint64_t unattributed_lines = 0;  // ranks beyond k_max_ranks
  std::vector<Communicator> communicators;
  bool sliced = false;
  std::vector<Slice> slices;
  std::vector<Finding> findings;  // worst first, then table order
  Severity worst = Severity::info;

  /// 0 when nothing or only info, 1 for warn, 2 for error; 64 when no
  /// input held a log line (all empty, binary or without NCCL text).
  int exit_code() const;
  bool no_log_at_all() const { return !files.empty() && not_logs.size() == files.size(); }
  /// "?" for -1 (a line without a rank prefix), else the rank's label.
  std::string rank_label(int rank) const;
  const Finding* find(std::string_view id) const;
};

struct Options {
  std::string slice_regex;  // empty: no slicing
};

class Analyzer {
 public:
  /// An invalid slice regex is an invalid error.
  static Result<Analyzer> create(const Options& options);

  /// Lines that follow belong to this file (evidence names it).
  void begin_file(const std::string& name);
  void add_bytes(std::uint64_t n) { m_report.bytes += n; }
  void feed(std::string_view line, std::uint64_t line_no);
  /// False once the current input showed itself binary in its first 64 KiB:
  /// the rest need not be read (a gzip bomb of zeros, /dev/zero on stdin).
  bool wants_more() const { return !m_file_binary; }
  /// Cross-rank rules; the analyser is spent afterwards.
  Report finish();

 private:
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Location {
    std::string_view line;
    std::uint64_t line_no;
  };

  /// Labels listed per finding.
  static constexpr std::size_t k_max_finding_ranks = 16;

  Analyzer() = default;
  // Rank identification (analyzer_ranks.cc).
  /// A line without a launcher prefix: the rank DeepEP or NVSHMEM names in
  /// the message, set as its launcher rank.
  static void rank_from_message(LineInfo& info);
  int rank_of(const LineInfo& info);
  int new_rank(std::string label);
  void add(Rule rule, Location at, int rank, std::string detail = {});
  Evidence evidence(Location at, int rank) const;
  RankFacts* facts_of(const LineInfo& info, int rank);
  HostFacts* host_of(const LineInfo& info);
  HostFacts* host_named(std::string_view name);
  void end_file();
  bool looks_binary() const;
  void on_plugin(std::string_view message, Location at, HostFacts* host);
  bool on_launch(std::string_view message, Location at);
  void cross_host_rules(const std::array<bool, 3>& rank_split);
  void tie_unopenable_devices();
  void nvshmem_transport_split();
  void note_deepep_peers(std::string_view message, int reporter);
  void on_nccl(const LineInfo& info, Location at, int rank);
  [[gnu::noinline]] void on_nccl_warn(const LineInfo& info, Location at, int rank);
  void on_other(const LineInfo& info, Location at, int rank);
  bool on_problem(std::string_view message, Location at, int rank);
  void on_nvshmem(const LineInfo& info, Location at, int rank);
  void on_catalogue_other(std::string_view message, Location at, int rank);
  // A finding of catalogue family `family` (an index) for this line.
  void add_family(int family, std::string_view message, Location at, int rank);
  bool on_catalogue(Source source, std::string_view message, std::string_view path, Location at,
                    int rank);
  void on_net_using(std::string_view message, Location at, int rank);
  void on_gdr(std::string_view message, Location at, int rank);
  void on_init(std::string_view message, Location at, int rank);
  void check_interfaces(const std::vector<Interface>& ifs, std::string_view what, Location at,
                        int rank);
  void count_collective(RankFacts* facts, std::string_view name);
  std::array<bool, 3> cross_rank_rules();  // which of version / network / devices split

  Report m_report;
  // RE2: linear time, no recursion, so a hostile line cannot blow the stack.
  std::unique_ptr<re2::RE2> m_slice;
  std::unordered_map<std::string, int, KeyHash, std::equal_to<>> m_rank_index;
  std::unordered_map<int, int> m_launcher_index;
  std::unordered_map<std::string, std::size_t, KeyHash, std::equal_to<>> m_comm_index;
  std::string m_last_key;
  int m_last_rank = -1;
  std::string m_file;
  std::size_t m_slice_in_file = 0;
  std::size_t m_comm_slots = 0;  // sum of nranks over m_report.communicators
  std::unordered_map<std::string, int, KeyHash, std::equal_to<>> m_host_index;
  // The current input, to tell a log from an empty, binary or unrelated file.
  bool m_in_file = false;
  std::uint64_t m_file_lines = 0;
  std::uint64_t m_file_text_lines = 0;  // lines that are not blank
  std::uint64_t m_file_log_lines = 0;   // NCCL / NVSHMEM / DeepEP / matched lines
  std::uint64_t m_file_sampled = 0;     // bytes looked at for binary content
  std::uint64_t m_file_bad_bytes = 0;   // NUL bytes and invalid UTF-8 among them
  std::uint64_t m_file_nul_bytes = 0;
  bool m_file_binary = false;   // decided binary when the sample filled up
  bool m_file_nvshmem = false;  // the current input printed NVSHMEM lines
  // The previous line was PyTorch's "Last error:": the next one is NCCL's
  // last WARN message, re-printed without its prefix.
  bool m_after_last_error = false;
  std::uint64_t m_adds = 0;  // add() calls, to see a line matched a rule
  std::array<Finding, k_rule_count> m_findings{};
  // Ranks named by one finding: O(1) membership, first ones kept in order.
  struct RankSet {
    std::vector<int> first;
    std::vector<bool> seen;
    std::size_t count = 0;
    void add(int rank);
  };
  std::array<RankSet, k_rule_count> m_finding_ranks{};
  // Catalogue families (catalogue.h), one slot per family, made on first use.
  std::vector<Finding> m_family_findings;
  std::vector<RankSet> m_family_ranks;
  // DeepEP timeouts: which ranks reported one, and which peers they waited on
  // (dst_rank / src_rank), to name the peers that never answered.
  std::map<int, std::uint64_t> m_deepep_waited;
  std::set<int> m_deepep_reporters;
};

}  // namespace epkit::logs

namespace epkit::logs {

/// Reads every input (see expand_inputs) through one Analyzer. The first
/// unreadable input stops it with an error naming the file.
Result<Report> analyze_inputs(const std::vector<std::string>& inputs, const Options& options);

}  // namespace epkit::logs
