// ElfInfo: what the dynamic loader and libibverbs read from a shared object.
//
// The doctor must explain why a provider fails to load on a node without
// loading it (dlopen runs constructors and would pull the wrong libibverbs
// into our own process), so it reads the dynamic section itself: SONAME,
// NEEDED, version definitions (DT_VERDEF) and version needs (DT_VERNEED).
// Only ELF64 little-endian x86-64 and aarch64 files are accepted; every offset
// is bounds-checked, so a truncated or corrupt file is an invalid error naming
// the file, never a crash.
#pragma once

#include <epkit/result.h>

#include <string>
#include <string_view>
#include <vector>

#include "host/sysroot.h"

namespace epkit::host {

/// The versions one NEEDED file must provide ("libibverbs.so.1" ->
/// {"IBVERBS_1.1", "IBVERBS_PRIVATE_34"}).
struct ElfVersionNeed {
  std::string file;
  std::vector<std::string> versions;
};

struct ElfInfo {
  std::string path;     // node path actually read (links resolved)
  std::string machine;  // "x86-64" or "aarch64"
  std::string soname;   // empty when the file has none
  std::vector<std::string> needed;
  /// Version names the file defines, without the base entry (which repeats
  /// the soname): {"IBVERBS_1.0", ..., "IBVERBS_PRIVATE_34"}.
  std::vector<std::string> version_defs;
  std::vector<ElfVersionNeed> version_needs;

  bool defines(std::string_view version) const;
  /// The versions needed from `file`; empty when it is not needed.
  std::vector<std::string> needs_from(std::string_view file) const;
};

/// Parses an in-memory image; `name` only labels errors.
Result<ElfInfo> parse_elf(std::string_view bytes, std::string_view name);

/// Printable NUL-terminated strings (at least 4 characters) from the file's
/// read-only data that contain `needle`. Read-only data: allocated, neither
/// writable nor executable PROGBITS sections; read-only, non-executable
/// PT_LOAD segments when the section table is stripped.
Result<std::vector<std::string>> elf_rodata_strings(std::string_view bytes, std::string_view name,
                                                    std::string_view needle);

/// Largest file read_elf loads (libibverbs and providers are well below it).
inline constexpr std::size_t k_max_elf_bytes = std::size_t{64} << 20;

/// Resolves links in `path` inside the sysroot, reads and parses the file.
Result<ElfInfo> read_elf(const Sysroot& fs, std::string_view path);
/// read_elf's file bytes, for elf_rodata_strings.
Result<std::string> read_elf_bytes(const Sysroot& fs, std::string_view path);

}  // namespace epkit::host
