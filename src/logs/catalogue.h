// The catalogue of failure messages `epkit logs` knows by wording: every
// WARN/ERROR site mined from NCCL 2.12-2.28, NVSHMEM 3.0-3.5 and DeepEP V1/V2
// (catalogue/sites.inc, made by catalogue/mine.py), grouped into families.
//
// A site is a printf format string; a log line matches it when the format's
// literal pieces appear in the line in order (the conversions match any
// text). Families group the sites of one event across versions and carry the
// diagnosis: cause, evidence to look for, fix and the doctor check. A site no
// curated family claims belongs to its subsystem's family (by source file),
// so every site has a name.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "logs/findings.h"

namespace epkit::logs {

enum class Source : std::uint8_t { nccl, nvshmem, deepep };

// How the site's message is printed (what precedes the format in a line).
enum class Kind : std::uint8_t {
  nccl_warn,             // host:pid:tid [dev] NCCL WARN <msg>
  nvshmem_warn,          // host:pid:tid [dev] FILE:LINE NVSHMEM WARN <msg>
  nvshmem_error,         // FILE:FUNC:LINE: <msg>
  nvshmem_warn_print,    // WARN: <msg>
  nvshmem_status,        // FILE:LINE: non-zero status: N <msg>
  nvshmem_error_status,  // FILE:LINE: error status: N <msg>
  nvshmem_null,          // FILE:LINE: NULL value <msg>
  nvshmem_check,         // FILE:LINE: <msg>
  nvshmem_exit,          // FILE:LINE: non-zero status: N: strerror, exiting... <msg>
  deepep_print,          // <msg> (printf from a kernel or the host)
  deepep_throw,          // std::runtime_error(<msg>), as Python prints it
  deepep_assert,         // EPException "Assertion" with <msg> as the reason
};

struct Site {
  Source source;
  Kind kind;
  std::string_view first;  // first and last mined version holding the wording
  std::string_view last;
  std::string_view file;  // source file in its repository
  std::string_view format;
};

struct Family {
  std::string_view id;
  Severity severity;
  std::string_view title;
  Source source;
  std::string_view file;  // claims sites under this path prefix ("" = any file) ...
  std::string_view keys;  // ... whose format holds one of these '|'-separated pieces ("" = all)
  std::string_view cause;
  std::string_view evidence;  // what to look for around the line
  std::string_view fix;
  std::string_view doctor_check;  // "" when no doctor check sees the cause on a node
  std::optional<Rule> rule;       // a family an older rule already reports: its id and text
};

std::span<const Site> catalogue_sites();
std::span<const Family> catalogue_families();
/// The index of the family with this id (its first entry), or -1.
int family_index(std::string_view id);
/// The family of each site (index into catalogue_families()); -1 for a site
/// whose wording is too generic to recognise ("%s").
int family_of_site(std::size_t site);
/// The RuleSpec a catalogue family reports findings under (its own, or its
/// rule's).
const RuleSpec& family_spec(std::size_t family);
/// Whether a site's wording can be told from a line at all (enough literal
/// text).
bool site_is_matchable(std::size_t site);

/// The family of a line's message, or -1. `nvshmem_path` is the source path
/// NVSHMEM printed before the message, if any: it names the subsystem when no
/// wording matches. For NCCL it is the FILE:LINE of a WARN line: a generic
/// CUDA failure printed from nvls.cc, p2p.cc or shm.cc gets that subsystem's
/// family.
struct CatalogueMatch {
  int family = -1;
  int site = -1;
};
/// `anchored`: the wording must start the message (a bare line, with no
/// prefix to tell it is NVSHMEM's, matched only that strictly).
CatalogueMatch match_catalogue(Source source, std::string_view message,
                               std::string_view nvshmem_path = {}, bool anchored = false);

/// The format filled with plausible values, and the whole line as its macro
/// prints it: fixtures and tests are made from the sources' wording.
std::string fill_format(std::string_view format);
std::string site_line(const Site& site);

}  // namespace epkit::logs
