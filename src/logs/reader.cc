#include "logs/reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <glob.h>
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

Result<LineReader> LineReader::open(const std::string& path) {
  LineReader reader;
  gzFile gz = nullptr;
  if (path == k_stdin_name) {
    reader.m_name = "<stdin>";
    int fd = dup(STDIN_FILENO);
    if (fd < 0) return make_error(ErrorCode::permission, "<stdin>: cannot read standard input");
    gz = gzdopen(fd, "rb");
    if (gz == nullptr) close(fd);
  } else {
    reader.m_name = path;
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      return make_error(ErrorCode::invalid, fmt::format("{}: is a folder", path));
    }
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      return make_error(err == ENOENT ? ErrorCode::not_found : ErrorCode::permission,
                        fmt::format("{}: {}", path, std::generic_category().message(err)));
    }
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
  return static_cast<std::size_t>(n);
}

}  // namespace epkit::logs
