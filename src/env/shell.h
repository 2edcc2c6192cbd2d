// Values as shell words, for every output that a shell reads (`epkit env`'s
// sh and mpirun formats, the fixes the doctor and the linter print).
#pragma once

#include <string>

namespace epkit::env {

/// The value bare when it is plain, else single-quoted.
std::string shell_word(const std::string& value);

}  // namespace epkit::env
