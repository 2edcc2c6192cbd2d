// The NCCL_* and NVSHMEM_* variable names that the libraries (and the tools
// around them) read, so that env.unknown-vars can tell a typo from a setting.
//
// NCCL: the variables NCCL 2.28.9 reads, plus documented ones that older
// releases read. NVSHMEM: 3.4's env_defs.h names (runtime), the names its
// build reads, and the UID bootstrap's. Plugins read NCCL_* names of their
// own; those are recognised by prefix (known_prefixes()).
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace epkit::env {

std::span<const std::string_view> known_nccl_vars();
std::span<const std::string_view> known_nvshmem_vars();

/// Names read by someone other than the library itself (PyTorch's legacy
/// NCCL_* aliases, NVSHMEM's build, DeepEP), with who reads them.
struct KnownName {
  std::string_view name;
  std::string_view reader;
};
std::span<const KnownName> known_other_vars();

/// Prefixes owned by plugins and tools: any name under them is theirs.
std::span<const KnownName> known_prefixes();

/// Who reads `name`: "NCCL", "NVSHMEM", a plugin or tool; nullopt when no one
/// we know does. Only meaningful for NCCL_* and NVSHMEM_* names.
std::optional<std::string_view> who_reads(std::string_view name);

/// The known name of the same family (NCCL_ or NVSHMEM_) closest to `name` by
/// edit distance; empty when the family is neither.
struct NearestName {
  std::string_view name;
  std::size_t distance = 0;
};
NearestName nearest_known(std::string_view name);

}  // namespace epkit::env
