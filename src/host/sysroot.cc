#include "host/sysroot.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

namespace epkit::host {
namespace {

constexpr int k_max_link_hops = 40;  // as the kernel's MAXSYMLINKS

Error errno_error(int err, std::string_view what, std::string_view path) {
  ErrorCode code = ErrorCode::internal;
  if (err == ENOENT || err == ENOTDIR) {
    code = ErrorCode::not_found;
  } else if (err == EACCES || err == EPERM) {
    code = ErrorCode::permission;
  }
  return make_error(code, fmt::format("{} {}: {}", what, path, std::strerror(err)));
}

FileInfo to_info(const struct stat& st) {
  FileInfo info;
  info.size = static_cast<std::uint64_t>(st.st_size);
  info.mode = st.st_mode & 07777;
  if (S_ISREG(st.st_mode)) {
    info.type = FileType::regular;
  } else if (S_ISDIR(st.st_mode)) {
    info.type = FileType::directory;
  } else if (S_ISLNK(st.st_mode)) {
    info.type = FileType::symlink;
  } else if (S_ISCHR(st.st_mode)) {
    info.type = FileType::char_device;
  } else if (S_ISBLK(st.st_mode)) {
    info.type = FileType::block_device;
  } else if (S_ISFIFO(st.st_mode)) {
    info.type = FileType::fifo;
  } else if (S_ISSOCK(st.st_mode)) {
    info.type = FileType::socket;
  }
  return info;
}

// Splits "/a/b/../c" into components, dropping "" and ".".
std::vector<std::string> components(std::string_view path) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= path.size()) {
    std::size_t next = path.find('/', pos);
    if (next == std::string_view::npos) next = path.size();
    std::string_view part = path.substr(pos, next - pos);
    if (!part.empty() && part != ".") out.emplace_back(part);
    pos = next + 1;
  }
  return out;
}

}  // namespace

Sysroot::Sysroot(std::string root) : m_root(std::move(root)) {
  while (!m_root.empty() && m_root.back() == '/') m_root.pop_back();
}

std::string Sysroot::host_path(std::string_view path) const {
  if (path.empty() || path.front() != '/') return fmt::format("{}/{}", m_root, path);
  return m_root + std::string(path);
}

Result<std::string> Sysroot::read(std::string_view path, std::size_t max_bytes) const {
  // Under a tree, an absolute link must land inside it (chroot semantics), not
  // on this machine's /dev or /proc.
  std::string real = host_path(path);
  if (!is_live()) {
    auto resolved = resolve(path);
    if (!resolved) return resolved.error();
    real = host_path(*resolved);
  }
  return read_regular_file(real, path, max_bytes, OverLimit::truncate);
}

Result<std::string> Sysroot::read_trimmed(std::string_view path) const {
  auto data = read(path);
  if (!data) return data.error();
  std::string& text = *data;
  auto not_space = [](unsigned char c) { return !std::isspace(c); };
  text.erase(text.begin(), std::find_if(text.begin(), text.end(), not_space));
  text.erase(std::find_if(text.rbegin(), text.rend(), not_space).base(), text.end());
  return std::move(text);
}

Result<std::vector<std::string>> Sysroot::list(std::string_view path) const {
  std::error_code ec;
  std::filesystem::directory_iterator it(host_path(path), ec);
  if (ec) return errno_error(ec.value(), "cannot list", path);
  std::vector<std::string> names;
  for (const auto& entry : it) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

Result<std::string> Sysroot::readlink(std::string_view path) const {
  std::string real = host_path(path);
  std::string target(4096, '\0');
  ssize_t n = ::readlink(real.c_str(), target.data(), target.size());
  if (n < 0) return errno_error(errno, "cannot read link", path);
  target.resize(static_cast<std::size_t>(n));
  return target;
}

Result<std::string> Sysroot::resolve(std::string_view path) const {
  // Walk component by component; a link's target replaces the walked prefix
  // (absolute: from the root) and is walked in turn. ".." never leaves the root.
  std::vector<std::string> pending = components(path);
  std::reverse(pending.begin(), pending.end());
  std::vector<std::string> done;
  int hops = 0;
  while (!pending.empty()) {
    std::string part = std::move(pending.back());
    pending.pop_back();
    if (part == "..") {
      if (!done.empty()) done.pop_back();
      continue;
    }
    done.push_back(part);
    std::string node_path;
    for (const auto& d : done) node_path += "/" + d;
    struct stat st {};
    if (::lstat(host_path(node_path).c_str(), &st) != 0) {
      return errno_error(errno, "cannot resolve", path);
    }
    if (!S_ISLNK(st.st_mode)) continue;
    if (++hops > k_max_link_hops) {
      return make_error(ErrorCode::invalid, fmt::format("cannot resolve {}: too many links", path));
    }
    auto target = readlink(node_path);
    if (!target) return target.error();
    done.pop_back();
    if (!target->empty() && target->front() == '/') done.clear();
    auto parts = components(*target);
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) pending.push_back(*it);
  }
  std::string out;
  for (const auto& d : done) out += "/" + d;
  return out.empty() ? std::string("/") : out;
}

Result<FileInfo> Sysroot::stat(std::string_view path) const {
  auto resolved = resolve(path);
  if (!resolved) return resolved.error();
  struct stat st {};
  if (::stat(host_path(*resolved).c_str(), &st) != 0)
    return errno_error(errno, "cannot stat", path);
  return to_info(st);
}

Result<FileInfo> Sysroot::lstat(std::string_view path) const {
  struct stat st {};
  if (::lstat(host_path(path).c_str(), &st) != 0) return errno_error(errno, "cannot stat", path);
  return to_info(st);
}

bool Sysroot::is_dir(std::string_view path) const {
  auto info = stat(path);
  return info && info->type == FileType::directory;
}

const char* file_kind(FileType type) {
  switch (type) {
    case FileType::regular:
      return "a regular file";
    case FileType::directory:
      return "a folder";
    case FileType::symlink:
      return "a symbolic link";
    case FileType::char_device:
      return "a character device";
    case FileType::block_device:
      return "a block device";
    case FileType::fifo:
      return "a fifo";
    case FileType::socket:
      return "a socket";
    case FileType::other:
      break;
  }
  return "not a regular file";
}

Result<std::string> read_regular_file(const std::string& real_path, std::string_view shown,
                                      std::size_t max_bytes, OverLimit over) {
  // stat() first: opening a device or a fifo can itself block or act (a tape
  // rewinds, a tty becomes ours); fstat() after, in case the path changed.
  struct stat st {};
  if (::stat(real_path.c_str(), &st) != 0) return errno_error(errno, "cannot open", shown);
  auto refuse = [&](const struct stat& s) -> std::optional<Error> {
    if (S_ISREG(s.st_mode)) return std::nullopt;
    return make_error(ErrorCode::invalid,
                      fmt::format("{}: {}, not a regular file", shown, file_kind(to_info(s).type)));
  };
  if (auto e = refuse(st)) return *e;
  int fd = ::open(real_path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return errno_error(errno, "cannot open", shown);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::fstat(fd, &st) != 0) return errno_error(errno, "cannot stat", shown);
  if (auto e = refuse(st)) return *e;
  std::string data;
  char buffer[8192];
  while (true) {
    // One byte past the limit tells "exactly max_bytes" from "longer".
    std::size_t want = std::min(sizeof buffer, max_bytes + 1 - data.size());
    ssize_t got = ::read(fd, buffer, want);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno_error(errno, "cannot read", shown);
    if (got == 0) break;
    data.append(buffer, static_cast<std::size_t>(got));
    if (data.size() > max_bytes) {
      if (over == OverLimit::fail) {
        return make_error(ErrorCode::invalid,
                          fmt::format("{}: larger than {} bytes", shown, max_bytes));
      }
      data.resize(max_bytes);
      break;
    }
  }
  return data;
}

std::string join_path(std::string_view a, std::string_view b) {
  std::string out(a);
  while (!out.empty() && out.back() == '/') out.pop_back();
  while (!b.empty() && b.front() == '/') b.remove_prefix(1);
  out += '/';
  out += b;
  return out;
}

std::string_view base_name(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  auto pos = path.rfind('/');
  return pos == std::string_view::npos ? path : path.substr(pos + 1);
}

std::string_view dir_name(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  auto pos = path.rfind('/');
  if (pos == std::string_view::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

}  // namespace epkit::host
