// What the rdma.* check files share (rdma.cc lists the checks): the finding
// collector, small parsers and the check functions themselves.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "checks/check.h"

namespace epkit::checks::rdma {

inline constexpr std::string_view k_verbs_soname = "libibverbs.so.1";

// Findings of one check, joined into an Outcome: the status is the worst
// finding's, the summary lists the findings of that status.
class Verdict {
 public:
  void note(Status status, std::string text, std::string expected = {}, std::string fix = {}) {
    m_findings.push_back({status, std::move(text), std::move(expected), std::move(fix)});
  }
  void add(std::string key, std::string value, std::string source) {
    m_evidence.push_back({std::move(key), std::move(value), std::move(source)});
  }
  Status worst() const {
    Status status = Status::pass;
    for (const auto& f : m_findings) status = worse(status, f.status);
    return status;
  }
  Outcome finish(std::string pass_summary) {
    Outcome out;
    out.status = worst();
    std::vector<std::string> texts;
    std::vector<std::string> expected;
    std::vector<std::string> fixes;
    if (out.status == Status::pass) texts.push_back(std::move(pass_summary));
    for (auto& f : m_findings) {
      if (f.status == out.status) texts.push_back(f.text);
      if (f.status == Status::pass || f.status == Status::skip) continue;
      append_unique(expected, f.expected);
      append_unique(fixes, f.fix);
    }
    out.summary = fmt::format("{}", fmt::join(texts, "; "));
    out.expected = fmt::format("{}", fmt::join(expected, "; "));
    out.fix = fmt::format("{}", fmt::join(fixes, "; "));
    out.evidence = std::move(m_evidence);
    return out;
  }

 private:
  struct Finding {
    Status status;
    std::string text, expected, fix;
  };
  static void append_unique(std::vector<std::string>& list, const std::string& item) {
    if (!item.empty() && std::find(list.begin(), list.end(), item) == list.end())
      list.push_back(item);
  }
  std::vector<Finding> m_findings;
  std::vector<Evidence> m_evidence;
};

std::optional<long> parse_integer(std::string_view text);
bool truthy(std::string_view value);
std::string port_path(const topo::RdmaNic& nic, const topo::IbPort& port, std::string_view leaf);

// rdma_userspace.cc: libibverbs and its providers, from the files only.
Outcome check_verbs_lib(const Context& ctx);
Outcome check_provider_abi(const Context& ctx);
Outcome check_provider_path(const Context& ctx);
// rdma_devices.cc: the devices a container was given, their ports.
Outcome check_devices(const Context& ctx);
// rdma_gid.cc: RoCE GID selection.
Outcome check_gid_index(const Context& ctx);
// rdma_gpudirect.cc: peer memory or DMA-BUF.
Outcome check_gpudirect(const Context& ctx);

}  // namespace epkit::checks::rdma
