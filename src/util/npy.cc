#include "util/npy.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace epkit::util {
namespace {

// numpy aligns the payload to 64 bytes (numpy.lib.format.ARRAY_ALIGN).
constexpr std::size_t k_align = 64;
// Magic (6), version (2), header length (2).
constexpr std::size_t k_preamble = 10;

std::string shape_tuple(const std::vector<std::int64_t>& shape) {
  if (shape.empty()) return "()";
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + ")";
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

Result<std::size_t> npy_item_size(std::string_view descr) {
  auto bad = [&](const char* why) {
    return make_error(ErrorCode::invalid, fmt::format("npy type '{}': {}", descr, why));
  };
  if (descr.size() < 3) return bad("expected <byte order><kind><size>, e.g. '<f4'");
  const char order = descr[0];
  if (order != '<' && order != '>' && order != '|' && order != '=') {
    return bad("the byte order must be '<', '>', '|' or '='");
  }
  if (std::string_view("biufc").find(descr[1]) == std::string_view::npos) {
    return bad("the kind must be b, i, u, f or c");
  }
  std::size_t size = 0;
  for (char c : descr.substr(2)) {
    if (c < '0' || c > '9') return bad("the size must be a number of bytes");
    size = size * 10 + static_cast<std::size_t>(c - '0');
    if (size > 64) return bad("the size is too large");
  }
  if (size == 0) return bad("the size must be at least 1");
  return size;
}

Result<std::string> npy_header(std::string_view descr, const std::vector<std::int64_t>& shape) {
  EPKIT_TRY(npy_item_size(descr));
  for (auto d : shape) {
    if (d < 0) {
      return make_error(ErrorCode::invalid,
                        fmt::format("npy shape {}: negative dimension", shape_tuple(shape)));
    }
  }
  // The dict numpy itself writes: keys sorted, a ", " after every entry.
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr,
                                 shape_tuple(shape));
  // Spaces, then the newline, so the preamble and header end on a 64-byte
  // boundary.
  std::size_t used = k_preamble + dict.size() + 1;
  std::size_t pad = (k_align - used % k_align) % k_align;
  dict.append(pad, ' ');
  dict += '\n';
  if (dict.size() > 0xffff) {
    return make_error(ErrorCode::invalid,
                      fmt::format("npy header of {} bytes does not fit format 1.0", dict.size()));
  }
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>((dict.size() >> 8) & 0xff);
  out += dict;
  return out;
}

Result<void> write_npy(const std::string& path, std::string_view descr,
                       const std::vector<std::int64_t>& shape, const void* data,
                       std::size_t bytes) {
  auto item = npy_item_size(descr);
  if (!item) return item.error();
  auto header = npy_header(descr, shape);
  if (!header) return header.error();
  std::size_t count = 1;
  for (auto d : shape) count *= static_cast<std::size_t>(d);
  if (count * *item != bytes) {
    return make_error(ErrorCode::invalid,
                      fmt::format("{}: shape {} of '{}' takes {} bytes, but {} were given", path,
                                  shape_tuple(shape), descr, count * *item, bytes));
  }
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "wb"));
  if (!f) {
    int err = errno;
    return make_error(err == EACCES ? ErrorCode::permission : ErrorCode::not_found,
                      fmt::format("cannot write {}: {}", path, std::strerror(err)));
  }
  bool ok = std::fwrite(header->data(), 1, header->size(), f.get()) == header->size();
  if (ok && bytes > 0) ok = std::fwrite(data, 1, bytes, f.get()) == bytes;
  // fclose flushes: a full disk shows up here, not in fwrite.
  std::FILE* raw = f.release();
  if (std::fclose(raw) != 0) ok = false;
  if (!ok) {
    return make_error(ErrorCode::internal,
                      fmt::format("writing {} ({} bytes) failed: {}", path, header->size() + bytes,
                                  std::strerror(errno)));
  }
  return {};
}

}  // namespace epkit::util
