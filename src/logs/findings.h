// The findings `epkit logs` can report: one table row per rule, each with a
// stable id (shared by the rules that differ only in cause), a severity, the
// cause and the fix, and the doctor check that tests the same cause on a node.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace epkit::logs {

enum class Severity { info, warn, error };
const char* to_string(Severity s);

enum class Rule {
  socket_fallback,
  socket_single_host,
  bad_interface,
  bond_in_hca,
  gdr_no_peer_memory,
  gdr_distance,
  acs,
  roce_unreachable,
  shm,
  shm_attach,  // a peer's segment could not be opened (not about space)
  memlock,
  net_plugin,
  version_mismatch,
  net_mismatch,
  net_mismatch_ignored,
  init_incomplete,
  init_unseen,
  gib_nonblocking,
  provider_abi,
  ibgda_mapping,
  deepep_timeout,
  watchdog_timeout,
  duplicate_gpu,
  ib_open_failed,           // an RDMA device NCCL could not open
  ib_open_failed_mismatch,  // ... and the NET device counts of ranks or hosts differ
  nvshmem_transport_split,  // some PEs skipped an RDMA device/transport that others use
  other_warn,
  // Cross-host comparisons: one finding per fact that differs between hosts.
  host_version,
  host_plugin,
  host_net,
  // Not a table row: the rule of findings of the catalogue's own families
  // (catalogue.h), whose specs live with the catalogue.
  catalogue,
};

inline constexpr std::size_t k_rule_count = static_cast<std::size_t>(Rule::host_net) + 1;

struct RuleSpec {
  Rule rule;
  std::string_view id;
  Severity severity;
  std::string_view title;
  std::string_view cause;
  std::string_view fix;
  std::string_view doctor_check;  // "" when no doctor check tests this cause
};

std::span<const RuleSpec> rule_table();
const RuleSpec& spec_of(Rule rule);

/// Where a finding was seen: file, 1-based line, and the line made printable.
struct Evidence {
  std::string file;
  std::uint64_t line = 0;
  std::string text;
  int rank = -1;  // index in Report::ranks; -1: the line names no rank
};

inline constexpr std::size_t k_max_evidence = 3;
inline constexpr std::size_t k_max_details = 8;

struct Finding {
  const RuleSpec* spec = nullptr;
  std::uint64_t count = 0;           // matching lines (or cross-rank cases)
  std::vector<Evidence> evidence;    // the first k_max_evidence
  std::vector<std::string> details;  // specifics: interface names, missing ranks
  std::vector<std::string> ranks;    // labels of the ranks involved (capped)
  std::uint64_t rank_count = 0;
  std::uint64_t unranked = 0;      // matching lines that name no rank
  std::vector<std::string> hosts;  // host comparisons: the hosts on every side (capped)
  std::string_view look_for;       // catalogue families: the evidence to look for
  std::uint64_t sites = 0;         // catalogue families: mined wordings in the family
};

}  // namespace epkit::logs
