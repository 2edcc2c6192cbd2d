// The versioned variable tables: for each NCCL, NVSHMEM, DeepEP (and the
// PyTorch and gIB names around them) variable that `epkit env` emits or lints,
// its type, default, the first and last library version that reads it, and
// where that fact comes from (a header or a documentation page). The table is
// data (var_table.cc); the generator, the linter and the doctor read it.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace epkit::env {

enum class Library { nccl, nvshmem, deepep, torch, gib, loader };

/// "NCCL", "NVSHMEM", "DeepEP", "PyTorch", "gIB", "ld.so".
const char* to_string(Library lib);

/// major.minor of a library release ("2.28", "3.4").
struct Version {
  int major = 0;
  int minor = 0;
  auto operator<=>(const Version&) const = default;
  std::string str() const;
};

/// "2.28.9-1" -> 2.28; nullopt when the text does not start with N.N.
std::optional<Version> parse_version(std::string_view text);

/// The release range each table covers: a `since` equal to the floor means
/// "that release or earlier".
inline constexpr Version k_nccl_floor{2, 18};
inline constexpr Version k_nccl_ceiling{2, 28};
inline constexpr Version k_nvshmem_floor{3, 0};
inline constexpr Version k_nvshmem_ceiling{3, 5};

struct VarSpec {
  std::string_view name;
  Library library;
  std::string_view type;  // "int", "bool", "string", "list", "path", "size"
  std::string_view default_value;
  Version since;  // first release that reads it
  Version until;  // last release that reads it; {0,0}: still read
  std::string_view source;
};

std::span<const VarSpec> var_table();
const VarSpec* find_var(std::string_view name);

/// Whether release `v` of the variable's library reads it.
bool reads(const VarSpec& spec, Version v);

}  // namespace epkit::env
