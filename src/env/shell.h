// Values as shell words, for every output that a shell reads (`epkit env`'s
// sh and mpirun formats, the fixes the doctor and the linter print).
#pragma once

#include <string>

namespace epkit::env {

/// The value bare when it is plain, else single-quoted (a ' as '\''): the one
/// quoting helper for every line a shell may read (`epkit env`'s sh, dotenv
/// and mpirun forms, the per-rank wrappers, the fixes the doctor, the linter
/// and `epkit topo` print). A quoted value runs nothing when sourced.
std::string shell_word(const std::string& value);

/// Whether the value is one sh reads as itself unquoted (letters, digits and
/// _./:,=+-@%^ only, not empty).
bool shell_plain(const std::string& value);

}  // namespace epkit::env
