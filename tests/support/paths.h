#pragma once
// Where the source tree, the built epkit binary and the C++ compiler lie.
//
// CMake passes these paths to tests/support/paths.cc alone (not to every test
// file): a path is a string literal whose length is the checkout's, and GCC
// 12's flow warnings (-Warray-bounds, -Wrestrict) on inlined std::string
// concatenations with such a literal come and go with that length. With the
// literal in one file and returned at run time, a commit that builds in one
// folder builds in every folder.
#include <string>
#include <string_view>

namespace epkit::test {

/// The source tree's root.
std::string source_dir();

/// Absolute path of a file in the source tree.
std::string source_path(std::string_view relative);

/// The epkit binary this build made.
std::string epkit_binary();

/// The C++ compiler this build used (tests that build shared objects).
std::string cxx_compiler();

}  // namespace epkit::test
