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

enum class FileType { regular, directory, symlink, char_device, block_device, fifo, socket, other };

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

  /// Whole file (sysfs and procfs attributes are small; max_bytes bounds the
  /// rest: a longer file is cut there). Links are followed inside the root.
  /// Only a regular file is read: a folder, fifo, socket or device is an
  /// invalid error naming it (a fifo in a node tree must not hang a passive
  /// command, /dev/zero must not fill memory).
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

/// What a file over the limit of read_regular_file() gives.
enum class OverLimit { truncate, fail };

/// Reads a regular file of this machine at `real_path` (`shown` names it in
/// errors): opened non-blocking and without becoming a controlling terminal,
/// refused unless it is a regular file (checked before and after opening),
/// at most max_bytes. The one bounded reader under Sysroot::read and the
/// --env-file readers.
Result<std::string> read_regular_file(const std::string& real_path, std::string_view shown,
                                      std::size_t max_bytes, OverLimit over);

/// "a folder", "a fifo", "a character device", ... for error messages.
const char* file_kind(FileType type);

/// Join two node paths with exactly one '/'.
std::string join_path(std::string_view a, std::string_view b);
/// "a/b/c" -> "c".
std::string_view base_name(std::string_view path);
/// "a/b/c" -> "a/b"; "/a" -> "/".
std::string_view dir_name(std::string_view path);

}  // namespace epkit::host
