// Golden files: a test's output compared with a committed file. Only
// EPKIT_UPDATE_GOLDEN=1 rewrites the file, and a rewriting run fails (naming
// what it rewrote), so that an update never reads as a pass of the code under
// test; any other value (0, empty, unset) compares.
#pragma once

#include <string>

namespace epkit::test {

enum class GoldenVerdict { match, differs, missing, rewritten, unchanged };

struct GoldenCheck {
  GoldenVerdict verdict = GoldenVerdict::differs;
  std::string message;  // for anything but match
};

/// Whether EPKIT_UPDATE_GOLDEN asks for a rewrite ("1" only).
bool golden_update_requested();
/// Compares `actual` with the file at `path`, or rewrites it when `update`.
GoldenCheck check_golden(const std::string& path, const std::string& actual, bool update);
/// The GoogleTest form: a failure unless the file matches (a rewrite fails
/// too). `what` names the output in the message.
void expect_golden(const std::string& path, const std::string& actual, const std::string& what);

}  // namespace epkit::test
