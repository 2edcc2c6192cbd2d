// Input side of `epkit logs`: which files to read, and reading them as lines.
//
// Reading is streamed in large blocks through zlib's gzread, which reads
// plain files transparently, so gzip and plain logs take the same path. Lines
// are string_views into the block: nothing is allocated per line.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "epkit/result.h"

namespace epkit::logs {

inline constexpr std::string_view k_stdin_name = "-";
/// Longer lines are cut to this many bytes (the rest is skipped), so one
/// line without '\n' cannot make memory grow with the file.
inline constexpr std::size_t k_max_line = 64 * 1024;

/// Bounds on one input, so that no input can make a read run forever: a pipe
/// that never ends, a file that keeps growing, a gzip bomb.
struct ReadLimits {
  /// Bytes of log text (after inflation) read from one input at most.
  std::uint64_t max_bytes = std::uint64_t{64} << 30;
  /// A gzip stream may inflate to at most this many times its compressed
  /// size (real logs: 5-50x; deflate's own bound is 1032x) ...
  std::uint64_t max_inflate_ratio = 250;
  /// ... once past this much output, so small inputs are never refused.
  std::uint64_t inflate_slack = std::uint64_t{256} << 20;
};
/// Files named by the command line: files, directories (recursively, sorted),
/// glob patterns, and "-" for stdin. An argument that names nothing is an
/// invalid error naming it.
Result<std::vector<std::string>> expand_inputs(const std::vector<std::string>& args);

class LineReader {
 public:
  /// Opens a regular file (plain or gzip) or, for "-", standard input. A
  /// folder, device, fifo or socket is an invalid error naming it: a read of
  /// /dev/zero or of a fifo without a writer would never end.
  static Result<LineReader> open(const std::string& path, const ReadLimits& limits = {});
  /// Reads from memory (tests, fuzzing, the benchmark).
  static LineReader from_memory(std::string_view data);

  /// Calls f(line, line_number) for every line: '\n' and a trailing '\r'
  /// removed, a last line without '\n' included, long lines cut. A read or
  /// decompression error, or an input past its ReadLimits, stops it with an
  /// error naming the file. When f returns bool, false stops the reading
  /// early (a binary input needs no more than its first lines read).
  template <typename F>
  Result<void> for_each_line(F&& f);

  std::uint64_t bytes_read() const { return m_bytes; }
  const std::string& name() const { return m_name; }

 private:
  struct GzCloser {
    void operator()(void* file) const;
  };
  LineReader() = default;
  /// Fills buf with up to `cap` bytes; 0 at end; error on failure.
  Result<std::size_t> read_block(char* buf, std::size_t cap);

  std::string m_name;
  std::unique_ptr<void, GzCloser> m_gz;
  std::string_view m_memory;  // used when m_gz is null
  std::uint64_t m_bytes = 0;
  ReadLimits m_limits;
};

template <typename F>
Result<void> LineReader::for_each_line(F&& f) {
  // Large blocks for files; small inputs in memory need no 4 MiB buffer.
  // Either way the block holds more than one maximal line.
  std::size_t block = 4 * 1024 * 1024;
  if (!m_gz && m_memory.size() + 1 < block) block = std::max(m_memory.size() + 1, 2 * k_max_line);
  std::unique_ptr<char[]> buf(new char[block]);
  std::size_t have = 0;   // bytes of an unfinished line at buf[0]
  bool skipping = false;  // inside a line longer than k_max_line, already reported
  std::uint64_t line_no = 0;
  // false: the caller wants no more lines.
  auto emit = [&](const char* p, std::size_t n) -> bool {
    if (n > 0 && p[n - 1] == '\r') --n;
    if (n > k_max_line) n = k_max_line;
    if constexpr (std::is_same_v<std::invoke_result_t<F&, std::string_view, std::uint64_t>, bool>) {
      return f(std::string_view(p, n), ++line_no);
    } else {
      f(std::string_view(p, n), ++line_no);
      return true;
    }
  };
  for (;;) {
    auto got = read_block(buf.get() + have, block - have);
    if (!got) return got.error();
    std::size_t n = *got;
    if (n == 0) {
      if (have > 0 && !skipping) emit(buf.get(), have);
      return {};
    }
    m_bytes += n;
    const char* p = buf.get();
    const char* end = p + have + n;
    while (p < end) {
      const char* nl =
          static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
      if (nl == nullptr) break;
      if (skipping) {
        skipping = false;
      } else if (!emit(p, static_cast<std::size_t>(nl - p))) {
        return {};
      }
      p = nl + 1;
    }
    have = static_cast<std::size_t>(end - p);
    if (have >= k_max_line || (skipping && have > 0)) {
      if (!skipping && !emit(p, k_max_line)) return {};
      skipping = true;
      have = 0;
    } else if (have > 0) {
      std::memmove(buf.get(), p, have);
    }
  }
}

}  // namespace epkit::logs
