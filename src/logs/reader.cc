#include "logs/reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

namespace epkit::logs {
namespace fs = std::filesystem;

namespace {

Result<void> add_directory(const std::string& dir, std::vector<std::string>& out) {
  std::error_code ec;
  std::vector<std::string> found;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec);
  if (ec) return make_error(ErrorCode::permission, fmt::format("{}: {}", dir, ec.message()));
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return make_error(ErrorCode::permission, fmt::format("{}: {}", dir, ec.message()));
    std::error_code type_ec;
    if (it->is_regular_file(type_ec)) found.push_back(it->path().string());
  }
  if (ec) return make_error(ErrorCode::permission, fmt::format("{}: {}", dir, ec.message()));
  std::sort(found.begin(), found.end());
  out.insert(out.end(), found.begin(), found.end());
  return {};
}

Result<void> add_path(const std::string& path, std::vector<std::string>& out) {
  std::error_code ec;
  auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    return make_error(ErrorCode::not_found, fmt::format("{}: no such file or folder", path));
  }
  if (fs::is_directory(status)) return add_directory(path, out);
  out.push_back(path);
  return {};
}

bool is_glob(const std::string& arg) {
  return arg.find_first_of("*?[") != std::string::npos;
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a fifo";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

Result<std::vector<std::string>> expand_inputs(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const auto& arg : args) {
    if (arg == k_stdin_name) {
      out.push_back(arg);
      continue;
    }
    std::error_code ec;
    if (!is_glob(arg) || fs::exists(arg, ec)) {
      EPKIT_TRY(add_path(arg, out));
      continue;
    }
    glob_t matches{};
    int rc = glob(arg.c_str(), 0, nullptr, &matches);
    std::vector<std::string> paths;
    if (rc == 0) paths.assign(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
    globfree(&matches);
    if (paths.empty()) {
      return make_error(ErrorCode::not_found, fmt::format("{}: no file matches", arg));
    }
    for (const auto& p : paths) EPKIT_TRY(add_path(p, out));
  }
  if (out.empty()) return make_error(ErrorCode::invalid, "no input named");
  return out;
}

void LineReader::GzCloser::operator()(void* file) const {
  gzclose(static_cast<gzFile>(file));
}

Result<LineReader> LineReader::open(const std::string& path, const ReadLimits& limits) {
  LineReader reader;
  reader.m_limits = limits;
  gzFile gz = nullptr;
  if (path == k_stdin_name) {
    // Standard input may be anything the shell connects (a pipe, a file,
    // /dev/zero): the byte cap and the binary check bound it.
    reader.m_name = "<stdin>";
    int fd = dup(STDIN_FILENO);
    if (fd < 0) return make_error(ErrorCode::permission, "<stdin>: cannot read standard input");
    gz = gzdopen(fd, "rb");
    if (gz == nullptr) close(fd);
  } else {
    reader.m_name = path;
    // O_NONBLOCK: opening a fifo must not wait for a writer; the type check
    // below refuses it before any read.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
      int err = errno;
      if (err == EISDIR)
        return make_error(ErrorCode::invalid, fmt::format("{}: is a folder", path));
      return make_error(err == ENOENT ? ErrorCode::not_found : ErrorCode::permission,
                        fmt::format("{}: {}", path, std::generic_category().message(err)));
    }
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      int err = errno;
      close(fd);
      return make_error(ErrorCode::permission,
                        fmt::format("{}: {}", path, std::generic_category().message(err)));
    }
    if (!S_ISREG(st.st_mode)) {
      close(fd);
      if (S_ISDIR(st.st_mode))
        return make_error(ErrorCode::invalid, fmt::format("{}: is a folder", path));
      return make_error(ErrorCode::invalid,
                        fmt::format("{}: is {}, not a log file (pipe it to `epkit logs -` if it "
                                    "is meant)",
                                    path, file_kind(st.st_mode)));
    }
    // Regular files never block; clear the flag so reads behave as usual.
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    gz = gzdopen(fd, "rb");
    if (gz == nullptr) close(fd);
  }
  if (gz == nullptr)
    return make_error(ErrorCode::internal, fmt::format("{}: cannot open", reader.m_name));
  // A large internal buffer: fewer read() calls; gzread copies plain files
  // straight into our block when the request is larger than this.
  gzbuffer(gz, 1 << 20);
  reader.m_gz.reset(gz);
  return reader;
}

LineReader LineReader::from_memory(std::string_view data) {
  LineReader reader;
  reader.m_name = "<memory>";
  reader.m_memory = data;
  return reader;
}

Result<std::size_t> LineReader::read_block(char* buf, std::size_t cap) {
  if (!m_gz) {
    std::size_t n = std::min(cap, m_memory.size());
    std::memcpy(buf, m_memory.data(), n);
    m_memory.remove_prefix(n);
    return n;
  }
  auto gz = static_cast<gzFile>(m_gz.get());
  if (m_bytes >= m_limits.max_bytes) {
    return make_error(ErrorCode::invalid,
                      fmt::format("{}: more than {} MiB of log text; epkit logs reads at most that "
                                  "much of one input",
                                  m_name, m_limits.max_bytes >> 20));
  }
  // Never ask for more than the cap leaves, so the cap is exact.
  cap = static_cast<std::size_t>(std::min<std::uint64_t>(cap, m_limits.max_bytes - m_bytes));
  int n = gzread(gz, buf, static_cast<unsigned>(std::min<std::size_t>(cap, 1u << 30)));
  int errnum = Z_OK;
  const char* message = gzerror(gz, &errnum);
  if (n < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
    if (errnum == Z_ERRNO) {
      return make_error(ErrorCode::permission, fmt::format("{}: read error: {}", m_name,
                                                           std::generic_category().message(errno)));
    }
    return make_error(ErrorCode::invalid,
                      fmt::format("{}: corrupt or truncated gzip data ({})", m_name,
                                  message != nullptr ? message : "zlib error"));
  }
  if (n > 0 && gzdirect(gz) == 0) {
    // Inflated output against compressed input: a gzip bomb (a few MB that
    // inflate to many GB) is refused once past the slack.
    auto out = m_bytes + static_cast<std::uint64_t>(n);
    auto in = static_cast<std::uint64_t>(std::max<z_off_t>(gzoffset(gz), 1));
    if (out > m_limits.inflate_slack && out / in > m_limits.max_inflate_ratio) {
      return make_error(ErrorCode::invalid,
                        fmt::format("{}: gzip data inflates more than {}x ({} MiB from {} KiB "
                                    "read); refused as a likely gzip bomb",
                                    m_name, m_limits.max_inflate_ratio, out >> 20, in >> 10));
    }
  }
  return static_cast<std::size_t>(n);
}

}  // namespace epkit::logs
