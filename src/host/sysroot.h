// Sysroot: the one door to /sys, /proc, /dev, /etc and library folders.
//
// Every path is absolute as seen on the node ("/sys/class/infiniband"); the
// sysroot maps it under its root folder. Symbolic links are followed with
// chroot semantics (an absolute target is taken inside the root), so a fixture
// tree behaves like the node it was taken from. The live node is root "/".
#pragma once

#include <epkit/result.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace epkit::host {

enum class FileType { regular, directory, symlink, char_device, block_device, other };

struct FileInfo {
  FileType type = FileType::other;
  std::uint64_t size = 0;
  unsigned mode = 0;  // permission bits
};

class Sysroot {
 public:
  /// root: a folder holding the node's tree; "/" (or "") is the live node.
  explicit Sysroot(std::string root = "/");

  const std::string& root() const { return m_root; }
  bool is_live() const { return m_root.empty(); }

  /// The path on this machine where node path `path` lives (no link following).
  std::string host_path(std::string_view path) const;

  /// Whole file (sysfs and procfs attributes are small; max_bytes bounds the rest).
  Result<std::string> read(std::string_view path, std::size_t max_bytes = 1 << 20) const;
  /// read() with surrounding whitespace removed (sysfs values end with '\n').
  Result<std::string> read_trimmed(std::string_view path) const;
  /// Entry names of a folder, sorted; not_found when it is missing.
  Result<std::vector<std::string>> list(std::string_view path) const;

  /// The node path with every link followed inside the root (like realpath).
  Result<std::string> resolve(std::string_view path) const;
  /// The target of one link, as stored.
  Result<std::string> readlink(std::string_view path) const;

  /// stat() after resolve(): what the path finally names.
  Result<FileInfo> stat(std::string_view path) const;
  /// lstat(): the entry itself.
  Result<FileInfo> lstat(std::string_view path) const;
  bool exists(std::string_view path) const { return stat(path).ok(); }
  bool is_dir(std::string_view path) const;

 private:
  std::string m_root;  // without trailing '/', empty for the live node
};

/// Join two node paths with exactly one '/'.
std::string join_path(std::string_view a, std::string_view b);
/// "a/b/c" -> "c".
std::string_view base_name(std::string_view path);
/// "a/b/c" -> "a/b"; "/a" -> "/".
std::string_view dir_name(std::string_view path);

}  // namespace epkit::host
