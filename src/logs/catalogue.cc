#include "logs/catalogue.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <unordered_map>

#include "logs/text.h"

namespace epkit::logs {
namespace {

constexpr Site k_sites[] = {
#include "logs/catalogue/sites.inc"
};

// One printf conversion at s[i] ('%'); returns its length (0 if none) and
// its conversion letter.
std::size_t conversion_at(std::string_view s, std::size_t i, char& letter) {
  std::size_t j = i + 1;
  while (j < s.size() && std::strchr("-+ #0", s[j]) != nullptr) ++j;
  while (j < s.size() && (s[j] == '*' || (s[j] >= '0' && s[j] <= '9'))) ++j;
  if (j < s.size() && s[j] == '.') {
    ++j;
    while (j < s.size() && (s[j] == '*' || (s[j] >= '0' && s[j] <= '9'))) ++j;
  }
  while (j < s.size() && std::strchr("hlzjtLq", s[j]) != nullptr) ++j;
  if (j >= s.size() || std::strchr("diouxXeEfgGcspn%", s[j]) == nullptr) return 0;
  letter = s[j];
  return j + 1 - i;
}

// The literal pieces of a format, in order ("%%" is a literal '%').
std::vector<std::string> pieces_of(std::string_view format) {
  std::vector<std::string> out(1);
  for (std::size_t i = 0; i < format.size();) {
    char letter = 0;
    std::size_t n = format[i] == '%' ? conversion_at(format, i, letter) : 0;
    if (n == 0) {
      out.back() += format[i++];
      continue;
    }
    i += n;
    if (letter == '%') {
      out.back() += '%';
    } else if (!out.back().empty()) {
      out.emplace_back();
    }
  }
  std::vector<std::string> kept;
  for (auto& p : out) {
    // Leading/trailing spaces are often doubled or cut in logs.
    std::string_view t = trim(p);
    if (!t.empty()) kept.emplace_back(t);
  }
  return kept;
}

std::size_t letters(const std::vector<std::string>& pieces) {
  std::size_t n = 0;
  for (const auto& p : pieces)
    for (char c : p) n += (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  return n;
}

// How much of a line a site's wording pins down: its literal text without
// spaces ("Call to %s failed : %s" beats "Call to %s failed").
std::size_t text_weight(const std::vector<std::string>& pieces) {
  std::size_t n = 0;
  for (const auto& p : pieces)
    for (char c : p) n += c != ' ';
  return n;
}

bool has_alnum(std::string_view p) {
  return std::any_of(p.begin(), p.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  });
}

bool pieces_match(const std::vector<std::string>& pieces, std::string_view m) {
  std::size_t at = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    std::size_t found = find_bytes(m.substr(at), pieces[i]);
    if (found == std::string_view::npos) {
      // Pasted lines lose closing quotes and stops ("Cuda failure 999
      // 'unknown error"): trailing pieces of punctuation only may be missing.
      return std::none_of(pieces.begin() + static_cast<std::ptrdiff_t>(i), pieces.end(),
                          [](const std::string& p) { return has_alnum(p); });
    }
    at += found + pieces[i].size();
  }
  return true;
}

bool has_key(std::string_view format, std::string_view keys) {
  while (!keys.empty()) {
    std::size_t bar = keys.find('|');
    std::string_view key = keys.substr(0, bar);
    if (!key.empty() && contains(format, key)) return true;
    if (bar == std::string_view::npos) break;
    keys.remove_prefix(bar + 1);
  }
  return false;
}

std::uint32_t key4(const char* p) {
  std::uint32_t k;
  std::memcpy(&k, p, 4);
  return k;
}

// Built once: each site's pieces, family and anchor, and an index from the
// first four bytes of each anchor (the site's longest piece) to its sites,
// so a line is matched in time linear in its length.
struct Index {
  std::vector<std::vector<std::string>> pieces;
  std::vector<std::size_t> weight;  // letters in the pieces: the better match has more
  std::vector<int> family;
  std::vector<bool> matchable;
  std::vector<std::uint16_t> anchor;  // which piece
  std::array<std::unordered_map<std::uint32_t, std::vector<std::uint32_t>>, 3> by_key;
  // One bit per hashed key: most positions of a line start no anchor, and a
  // bit test is far cheaper than a map lookup.
  std::array<std::array<std::uint64_t, 1024>, 3> key_bits{};
  static std::size_t bit_of(std::uint32_t key) { return (key * 2654435761u) >> 16; }
  std::vector<RuleSpec> specs;

  Index() {
    std::span<const Family> families = catalogue_families();
    const std::size_t n = std::size(k_sites);
    pieces.resize(n);
    weight.resize(n);
    family.assign(n, -1);
    matchable.assign(n, false);
    anchor.assign(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
      const Site& s = k_sites[i];
      pieces[i] = pieces_of(s.format);
      weight[i] = text_weight(pieces[i]);
      for (std::size_t f = 0; f < families.size(); ++f) {
        const Family& fam = families[f];
        if (fam.source != s.source || !s.file.starts_with(fam.file)) continue;
        if (!fam.keys.empty() && !has_key(s.format, fam.keys)) continue;
        family[i] = static_cast<int>(f);
        break;
      }
      std::size_t best = 0;
      for (std::size_t p = 0; p < pieces[i].size(); ++p) {
        if (pieces[i][p].size() > pieces[i][best].size()) best = p;
      }
      // Too little text to tell the wording from any other line ("%s",
      // "Error %d"): such a site is counted as not recognisable.
      matchable[i] = letters(pieces[i]) >= 8 && pieces[i][best].size() >= 4;
      if (!matchable[i]) continue;
      anchor[i] = static_cast<std::uint16_t>(best);
      std::uint32_t key = key4(pieces[i][best].data());
      by_key[static_cast<std::size_t>(s.source)][key].push_back(static_cast<std::uint32_t>(i));
      key_bits[static_cast<std::size_t>(s.source)][bit_of(key) / 64] |= std::uint64_t{1}
                                                                        << (bit_of(key) % 64);
    }
    // Heaviest first: once a site matched, lighter candidates are skipped.
    for (auto& per_source : by_key) {
      for (auto& [key, list] : per_source) {
        std::stable_sort(list.begin(), list.end(), [this](std::uint32_t a, std::uint32_t b) {
          return weight[a] > weight[b];
        });
      }
    }
    specs.reserve(families.size());
    for (const Family& f : families) {
      if (f.rule) {
        specs.push_back(spec_of(*f.rule));
      } else {
        specs.push_back(
            RuleSpec{Rule::catalogue, f.id, f.severity, f.title, f.cause, f.fix, f.doctor_check});
      }
    }
  }
};

const Index& index() {
  static const Index built;
  return built;
}

constexpr std::size_t k_max_scan = 512;  // bytes of a message looked at

// NCCL's CUDA check macros print "Cuda failure %d '%s'" from the file that
// made the call (the FILE:LINE before "NCCL WARN"): the file names what
// failed better than the generic wording.
struct FileRefinement {
  std::string_view file;     // piece of the printed source path
  std::string_view message;  // piece the message must hold ("" = any)
  std::string_view family;
};
constexpr FileRefinement k_cuda_failure_by_file[] = {
    {"nvls", "", "nccl.nvls"},                                 // multicast objects: Fabric Manager
    {"shm.cc", "peer access is not supported", "nccl.cumem"},  // cuMem host buffers need P2P
    {"p2p.cc", "", "nccl.p2p"},
};

CatalogueMatch refine_by_file(CatalogueMatch best, std::string_view message,
                              std::string_view path) {
  static const int cuda_failure = family_index("nccl.cuda-failure");
  if (path.empty() || best.family != cuda_failure) return best;
  for (const FileRefinement& r : k_cuda_failure_by_file) {
    if (contains(path, r.file) && (r.message.empty() || contains(message, r.message))) {
      best.family = family_index(r.family);
      return best;
    }
  }
  return best;
}

}  // namespace

std::span<const Site> catalogue_sites() {
  return k_sites;
}

int family_index(std::string_view id) {
  std::span<const Family> families = catalogue_families();
  for (std::size_t f = 0; f < families.size(); ++f) {
    if (families[f].id == id) return static_cast<int>(f);
  }
  return -1;
}

int family_of_site(std::size_t site) {
  return site < std::size(k_sites) ? index().family[site] : -1;
}

bool site_is_matchable(std::size_t site) {
  return site < std::size(k_sites) && index().matchable[site];
}

const RuleSpec& family_spec(std::size_t family) {
  return index().specs.at(family);
}

CatalogueMatch match_catalogue(Source source, std::string_view message,
                               std::string_view nvshmem_path, bool anchored) {
  if (source == Source::deepep) {
    // DeepEP's exceptions wrap a reason that is code, not a wording:
    // "Failed: Assertion error FILE:LINE 'cond'" (V1), "Assertion exception
    // (FILE:LINE): cond" (V2), and the same for CUDA/NCCL errors.
    CatalogueMatch wrapped;
    if (contains(message, "Assertion error ") || contains(message, "Assertion exception (")) {
      wrapped.family = family_index("deepep.assert");
    } else if (contains(message, " exception (") || contains(message, "Failed: CUDA error") ||
               contains(message, "Failed: NCCL error")) {
      wrapped.family = family_index("deepep.error");
    }
    if (wrapped.family >= 0) return wrapped;
  }
  const Index& ix = index();
  std::string_view m = message.substr(0, k_max_scan);
  CatalogueMatch best;
  // A wording that also lives in other files ("cuCtxGetDevice failed.") is
  // taken from the file the line names, when it names one.
  std::string_view path_tail;
  if (std::size_t src = nvshmem_path.rfind("src/"); src != std::string_view::npos)
    path_tail = nvshmem_path.substr(src);
  auto score = [&](std::uint32_t site) {
    bool same_file = !path_tail.empty() && k_sites[site].file == path_tail;
    return ix.weight[site] + (same_file ? std::size_t{1} << 20 : 0);
  };
  std::size_t best_weight = 0;
  const auto& by_key = ix.by_key[static_cast<std::size_t>(source)];
  // A line rarely meets more than a few candidates; remember the tested ones
  // so a site is verified once per line.
  std::array<std::uint32_t, 64> tested{};
  std::size_t n_tested = 0;
  const auto& bits = ix.key_bits[static_cast<std::size_t>(source)];
  for (std::size_t i = 0; i + 4 <= m.size(); ++i) {
    std::uint32_t key = key4(m.data() + i);
    std::size_t bit = Index::bit_of(key);
    if ((bits[bit / 64] & (std::uint64_t{1} << (bit % 64))) == 0) continue;
    auto it = by_key.find(key);
    if (it == by_key.end()) continue;
    for (std::uint32_t site : it->second) {
      std::size_t site_score = score(site);
      if (site_score <= best_weight) {
        if (path_tail.empty()) break;  // sorted by weight: the rest weigh less
        continue;
      }
      const std::string& a = ix.pieces[site][ix.anchor[site]];
      if (m.size() - i < a.size() || std::memcmp(m.data() + i, a.data(), a.size()) != 0) continue;
      if (std::find(tested.begin(), tested.begin() + n_tested, site) != tested.begin() + n_tested)
        continue;
      if (n_tested < tested.size()) tested[n_tested++] = site;
      if (!pieces_match(ix.pieces[site], m)) continue;
      if (anchored && !m.starts_with(ix.pieces[site].front())) continue;
      best_weight = site_score;
      best.site = static_cast<int>(site);
      best.family = ix.family[site];
    }
  }
  if (source == Source::nccl) return refine_by_file(best, message, nvshmem_path);
  if (best.family >= 0 || nvshmem_path.empty()) return best;
  // No wording matched: the source path names the subsystem.
  std::span<const Family> families = catalogue_families();
  for (std::size_t f = 0; f < families.size(); ++f) {
    const Family& fam = families[f];
    if (fam.source != source || !fam.keys.empty() || fam.file.size() < 8) continue;
    if (contains(nvshmem_path, fam.file.substr(4))) {  // "src/" may be cut from the path
      best.family = static_cast<int>(f);
      return best;
    }
  }
  return best;
}

std::string fill_format(std::string_view format) {
  std::string out;
  for (std::size_t i = 0; i < format.size();) {
    char letter = 0;
    std::size_t n = format[i] == '%' ? conversion_at(format, i, letter) : 0;
    if (n == 0) {
      out += format[i++];
      continue;
    }
    i += n;
    std::string_view before =
        trim(std::string_view(out).substr(out.size() > 24 ? out.size() - 24 : 0));
    switch (letter) {
      case '%':
        out += '%';
        break;
      case 's':
        // Plausible text for what the words before the conversion name.
        if (before.ends_with("device") || before.ends_with("HCA") || before.ends_with("hca") ||
            before.ends_with("dev") || before.ends_with("name:") || before.ends_with("NIC") ||
            before.ends_with("IB :") || before.ends_with("IB:")) {
          out += "mlx5_3";
        } else if (before.ends_with("event:") || before.ends_with("event :")) {
          out += "port error";
        } else if (before.ends_with("NCCL_OOB_NET_IFNAME=") || before.ends_with("interface") ||
                   before.ends_with("excluding") || before.ends_with("matching")) {
          out += "eth9";
        } else if (before.ends_with("peer") || before.ends_with("to") || before.ends_with("from") ||
                   before.ends_with("address")) {
          out += "10.0.1.2<46213>";
        } else if (before.ends_with("map") || before.ends_with("extend") ||
                   before.ends_with("segment") || before.ends_with("file")) {
          out += "/dev/shm/nccl-Ab12Cd";
        } else if (before.ends_with("Call to")) {
          out += "ibv_create_cq";
        } else {
          out += "invalid argument";
        }
        break;
      case 'p':
        out += "0x7f3a4c001000";
        break;
      case 'x':
      case 'X':
        out += "1a2b";
        break;
      case 'c':
        out += 'x';
        break;
      case 'e':
      case 'E':
      case 'f':
      case 'g':
      case 'G':
        out += "1.5";
        break;
      default:
        out += '3';
        break;
    }
  }
  return out;
}

std::string site_line(const Site& site) {
  std::string msg = fill_format(site.format);
  std::string path =
      fmt::format("/opt/{}/{}", site.source == Source::deepep ? "DeepEP" : "nvshmem", site.file);
  switch (site.kind) {
    case Kind::nccl_warn:
      return "node1:2201:2241 [3] NCCL WARN " + msg;
    case Kind::nvshmem_warn:
      return fmt::format("node1:2201:2241 [3] {}:321 NVSHMEM WARN {}", path, msg);
    case Kind::nvshmem_error:
      return fmt::format("{}:nvshmemi_setup:321: {}", path, msg);
    case Kind::nvshmem_warn_print:
      return "WARN: " + msg;
    case Kind::nvshmem_status:
      return fmt::format("{}:321: non-zero status: 7 {}", path, msg);
    case Kind::nvshmem_error_status:
      return fmt::format("{}:321: error status: 7 {}", path, msg);
    case Kind::nvshmem_null:
      return fmt::format("{}:321: NULL value {}", path, msg);
    case Kind::nvshmem_check:
      return fmt::format("{}:321: {}", path, msg);
    case Kind::nvshmem_exit:
      return fmt::format("{}:321: non-zero status: 1: Connection refused, exiting... {}", path,
                         msg);
    case Kind::deepep_print:
      return msg;
    case Kind::deepep_throw:
      return "RuntimeError: " + msg;
    case Kind::deepep_assert:
      return fmt::format("RuntimeError: Assertion exception ({}:321): {}", path, msg);
  }
  return msg;
}

}  // namespace epkit::logs
