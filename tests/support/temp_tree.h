// TempTree: a throw-away node tree for tests (fixture sysroots, env files,
// tiny ELF libraries). Removed when it goes out of scope.
#pragma once

#include <string>
#include <string_view>

#include "host/env.h"
#include "host/host.h"

namespace epkit::test {

class TempTree {
 public:
  TempTree();
  /// A copy of an example or fixture tree (path relative to the source tree,
  /// e.g. "examples/gke-a4"), links kept as links.
  explicit TempTree(std::string_view source_relative);
  ~TempTree();
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;

  const std::string& root() const { return m_root; }
  /// The host path of node path `path`.
  std::string path(std::string_view node_path) const;

  /// Writes a file (parents created).
  void write(std::string_view node_path, std::string_view content) const;
  /// Creates a symbolic link at node_path pointing to target (stored as given).
  void link(std::string_view node_path, std::string_view target) const;
  void mkdir(std::string_view node_path) const;
  void remove(std::string_view node_path) const;  // file, link or whole folder

  /// A Host over this tree with the given environment and no libraries.
  host::Host host(host::Env env = host::Env({}, "test")) const;

 private:
  std::string m_root;
};

/// Builds a shared object with g++ from C source and an optional version
/// script, for ELF-reading tests. Returns "" and fails the test on error.
std::string build_shared_object(const std::string& out_path, const std::string& c_source,
                                const std::string& version_script = "",
                                const std::string& extra_flags = "");

}  // namespace epkit::test
