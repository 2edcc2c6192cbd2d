#include "runtime/facts.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/peer_json.h"
#include "runtime/store.h"

namespace epkit::runtime {
namespace {

using Json = nlohmann::json;

// "host-a:0,1; host-b:2" for a set of ranks.
std::string name_ranks(const std::vector<RankFacts>& facts, const std::vector<int>& ranks) {
  std::map<std::string, std::vector<int>> by_host;
  for (int rank : ranks) {
    for (const auto& f : facts) {
      if (f.rank == rank) by_host[f.host.empty() ? "?" : f.host].push_back(rank);
    }
  }
  std::vector<std::string> parts;
  for (const auto& [host, list] : by_host)
    parts.push_back(fmt::format("{}:{}", host, fmt::join(list, ",")));
  return fmt::format("{}", fmt::join(parts, "; "));
}

// The value most ranks (or nodes) share; the others are blamed.
template <typename Members>
const std::string& largest_group(const std::map<std::string, Members>& groups) {
  auto largest = std::max_element(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
    return a.second.size() < b.second.size();
  });
  return largest->first;
}

std::string shown(const std::string& value) {
  return value.empty() ? "unset" : "'" + value + "'";
}

// Groups ranks by one field; reports when ranks disagree, blaming all but the
// largest group.
void compare_field(const std::vector<RankFacts>& facts, MismatchKind kind, const char* what,
                   std::string RankFacts::*field, std::vector<Mismatch>& out) {
  std::map<std::string, std::vector<int>> groups;
  for (const auto& f : facts) {
    if (!(f.*field).empty()) groups[f.*field].push_back(f.rank);
  }
  if (groups.size() < 2) return;
  const auto& majority = largest_group(groups);
  std::vector<std::string> parts;
  std::vector<int> blamed;
  for (const auto& [value, ranks] : groups) {
    parts.push_back(fmt::format("{} on {}", value, name_ranks(facts, ranks)));
    if (value != majority) blamed.insert(blamed.end(), ranks.begin(), ranks.end());
  }
  std::sort(blamed.begin(), blamed.end());
  out.push_back({kind, fmt::format("{} differ: {}", what, fmt::join(parts, " vs ")), blamed});
}

void compare_gpus(const std::vector<RankFacts>& facts, std::vector<Mismatch>& out) {
  std::map<std::pair<std::string, std::string>, std::vector<int>> users;
  for (const auto& f : facts) {
    if (f.shared_gpu) continue;  // --oversubscribe: sharing is the point
    std::string id = !f.gpu_uuid.empty() ? f.gpu_uuid : f.pci_bus_id;
    if (!id.empty()) users[{f.host_id, id}].push_back(f.rank);
  }
  for (const auto& [key, ranks] : users) {
    if (ranks.size() < 2) continue;
    out.push_back({MismatchKind::duplicate_gpu,
                   fmt::format("ranks {} share GPU {} on {}: each rank needs its own GPU "
                               "(check LOCAL_RANK and CUDA_VISIBLE_DEVICES)",
                               name_ranks(facts, ranks), key.second, key.first),
                   ranks});
  }
}

// Per host, the set of values a key takes ("" = unset on some rank). Hosts
// are compared with each other, not ranks: a per-rank setting (one HCA per
// GPU) is legitimate as long as every node does the same.
using HostProfile = std::map<std::string, std::set<std::string>>;

void compare_hosts(const std::vector<RankFacts>& facts, std::vector<Mismatch>& out) {
  std::map<std::string, std::vector<const RankFacts*>> hosts;
  for (const auto& f : facts) hosts[f.host_id].push_back(&f);
  if (hosts.size() < 2) return;

  std::set<std::string> keys;
  for (const auto& f : facts) {
    for (const auto& [key, value] : f.network_env) keys.insert(key);
  }
  auto blame_minority = [&](const std::map<std::string, std::vector<std::string>>& by_value,
                            MismatchKind kind, std::string what) {
    if (by_value.size() < 2) return;
    const auto& majority = largest_group(by_value);
    std::vector<std::string> parts;
    std::vector<int> blamed;
    for (const auto& [value, names] : by_value) {
      parts.push_back(fmt::format("{} on {}", value, fmt::join(names, ", ")));
      if (value == majority) continue;
      for (const auto& name : names) {
        for (const auto* f : hosts[name]) blamed.push_back(f->rank);
      }
    }
    std::sort(blamed.begin(), blamed.end());
    out.push_back({kind,
                   fmt::format("{} differs between nodes: {}", what, fmt::join(parts, " vs ")),
                   blamed});
  };

  for (const auto& key : keys) {
    std::map<std::string, std::vector<std::string>> by_value;
    for (const auto& [name, ranks] : hosts) {
      std::set<std::string> values;
      for (const auto* f : ranks) {
        auto it = f->network_env.find(key);
        values.insert(it == f->network_env.end() ? std::string() : it->second);
      }
      std::vector<std::string> texts;
      for (const auto& v : values) texts.push_back(shown(v));
      by_value[fmt::format("{}", fmt::join(texts, "|"))].push_back(name);
    }
    blame_minority(by_value, MismatchKind::network_env, key);
  }

  std::map<std::string, std::vector<std::string>> by_hcas;
  for (const auto& [name, ranks] : hosts) {
    std::set<std::string> hcas;
    for (const auto* f : ranks) hcas.insert(f->hcas.begin(), f->hcas.end());
    by_hcas[hcas.empty() ? "no HCAs" : fmt::format("{{{}}}", fmt::join(hcas, ","))].push_back(name);
  }
  blame_minority(by_hcas, MismatchKind::hca_set, "the HCA set");
}

// Version-like token: digits and dots, starting with a digit.
std::string first_version_token(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
    std::size_t end = pos;
    while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end]))) ++end;
    std::string_view token = text.substr(pos, end - pos);
    if (!token.empty() && std::isdigit(static_cast<unsigned char>(token.front())) &&
        token.find('.') != std::string_view::npos &&
        std::all_of(token.begin(), token.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c)) || c == '.';
        })) {
      return std::string(token);
    }
    pos = end;
  }
  return "";
}

}  // namespace

const char* to_string(MismatchKind kind) {
  switch (kind) {
    case MismatchKind::nccl_version:
      return "nccl_version";
    case MismatchKind::cuda_version:
      return "cuda_version";
    case MismatchKind::driver_version:
      return "driver_version";
    case MismatchKind::duplicate_gpu:
      return "duplicate_gpu";
    case MismatchKind::network_env:
      return "network_env";
    case MismatchKind::hca_set:
      return "hca_set";
  }
  return "unknown";
}

std::string facts_to_json(const RankFacts& f) {
  Json j{{"rank", f.rank},
         {"local_rank", f.local_rank},
         {"host", f.host},
         {"host_id", f.host_id},
         {"gpu_uuid", f.gpu_uuid},
         {"pci_bus_id", f.pci_bus_id},
         {"driver_version", f.driver_version},
         {"cuda_version", f.cuda_version},
         {"nccl_version", f.nccl_version},
         {"nccl_library", f.nccl_library},
         {"network_env", f.network_env},
         {"hcas", f.hcas},
         {"shared_gpu", f.shared_gpu}};
  // Strings from sysfs or the environment may hold invalid UTF-8: replaced,
  // never thrown on.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<RankFacts> facts_from_json(std::string_view text) {
  // A peer's document: every field is checked before use (runtime/peer_json.h).
  Json j = peer::parse(text);
  if (j.is_discarded() || !j.is_object()) {
    return make_error(ErrorCode::invalid, "rank facts: not a JSON object");
  }
  auto bad = [](std::string_view key) {
    return make_error(ErrorCode::invalid,
                      fmt::format("rank facts: '{}' is missing, of another type, out of range or "
                                  "holds control characters",
                                  key));
  };
  RankFacts f;
  auto rank = peer::int_field(j, "rank", 0, k_max_world_size - 1);
  if (!rank) return bad("rank");
  f.rank = static_cast<int>(*rank);
  auto local_rank = peer::int_field(j, "local_rank", 0, k_max_world_size - 1);
  if (!local_rank) return bad("local_rank");
  f.local_rank = static_cast<int>(*local_rank);
  struct Field {
    const char* key;
    std::string* value;
  };
  for (auto [key, value] :
       {Field{"host", &f.host}, Field{"host_id", &f.host_id}, Field{"gpu_uuid", &f.gpu_uuid},
        Field{"pci_bus_id", &f.pci_bus_id}, Field{"driver_version", &f.driver_version},
        Field{"cuda_version", &f.cuda_version}, Field{"nccl_version", &f.nccl_version},
        Field{"nccl_library", &f.nccl_library}}) {
    auto text_value = peer::string_field(j, key);
    if (!text_value) return bad(key);
    *value = std::move(*text_value);
  }
  const Json* env = peer::field(j, "network_env");
  if (env == nullptr || !env->is_object() || env->size() > 1024) return bad("network_env");
  for (const auto& [name, value] : env->items()) {
    auto v = peer::string_value(value);
    if (!v || name.size() > 256 || !peer::string_value(Json(name))) return bad("network_env");
    f.network_env[name] = std::move(*v);
  }
  const Json* hcas = peer::field(j, "hcas");
  if (hcas == nullptr || !hcas->is_array() || hcas->size() > 1024) return bad("hcas");
  for (const auto& hca : *hcas) {
    auto v = peer::string_value(hca, 256);
    if (!v) return bad("hcas");
    f.hcas.push_back(std::move(*v));
  }
  if (peer::field(j, "shared_gpu") != nullptr) {
    auto shared = peer::bool_field(j, "shared_gpu");
    if (!shared) return bad("shared_gpu");
    f.shared_gpu = *shared;
  }
  return f;
}

std::map<std::string, std::string> network_env(const host::Env& env) {
  std::map<std::string, std::string> out;
  for (const char* prefix : {"NCCL_", "NVSHMEM_"}) {
    for (const auto& name : env.names_with_prefix(prefix)) {
      if (name == "NCCL_HOSTID") continue;
      if (auto value = env.get_nonempty(name)) out[name] = *value;
    }
  }
  return out;
}

RankFacts collect_host_facts(const host::Host& host, int rank, int local_rank) {
  RankFacts facts;
  facts.rank = rank;
  facts.local_rank = local_rank;
  facts.host = host.fs().read_trimmed("/proc/sys/kernel/hostname").value_or(std::string("unknown"));
  facts.host_id = host.env().get_nonempty("NCCL_HOSTID").value_or(facts.host);
  if (auto version = host.fs().read_trimmed("/sys/module/nvidia/version")) {
    facts.driver_version = *version;
  } else if (auto proc = host.fs().read("/proc/driver/nvidia/version", 4096)) {
    facts.driver_version = first_version_token(proc->substr(0, proc->find('\n')));
  }
  facts.hcas = host.fs().list("/sys/class/infiniband").value_or(std::vector<std::string>{});
  facts.network_env = network_env(host.env());
  return facts;
}

std::vector<Mismatch> compare_facts(const std::vector<RankFacts>& facts) {
  std::vector<Mismatch> out;
  compare_field(facts, MismatchKind::nccl_version, "NCCL versions", &RankFacts::nccl_version, out);
  compare_field(facts, MismatchKind::cuda_version, "CUDA versions", &RankFacts::cuda_version, out);
  compare_field(facts, MismatchKind::driver_version, "driver versions", &RankFacts::driver_version,
                out);
  compare_gpus(facts, out);
  compare_hosts(facts, out);
  return out;
}

Result<std::vector<RankFacts>> exchange_facts(Store& store, const RankFacts& mine, int world_size,
                                              Deadline deadline) {
  EPKIT_TRY(store.set("facts/" + std::to_string(mine.rank), facts_to_json(mine), deadline));
  std::vector<RankFacts> all;
  for (int rank = 0; rank < world_size; ++rank) {
    auto text = store.get("facts/" + std::to_string(rank), deadline);
    if (!text) return text.error();
    auto facts = facts_from_json(*text);
    if (!facts) {
      return make_error(ErrorCode::invalid,
                        fmt::format("facts of rank {}: {}", rank, facts.error().message));
    }
    if (facts->rank != rank) {
      return make_error(ErrorCode::invalid,
                        fmt::format("facts under rank {} claim rank {}", rank, facts->rank));
    }
    all.push_back(std::move(*facts));
  }
  return all;
}

}  // namespace epkit::runtime
