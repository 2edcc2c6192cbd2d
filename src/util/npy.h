// NumPy .npy files (format version 1.0), written so that tensors leave epkit
// in a form any numpy can check (`epkit bench ep --dump`).
//
// Layout: the magic "\x93NUMPY", version bytes 1 0, the header length as a
// little-endian uint16, then the header, a Python dict literal
// "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }" padded with
// spaces and ended by '\n' so that magic + length + header is a multiple of
// 64 bytes (what numpy.save writes, so the payload is aligned for mmap), then
// the elements in C order.
#pragma once

#include <epkit/result.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace epkit::util {

/// Bytes per element of a numpy type string of the form <byte order><kind>
/// <size>: '<f4' -> 4, '|u1' -> 1, '<i8' -> 8. An invalid error for
/// anything else (no byte order, no size, unknown kind).
Result<std::size_t> npy_item_size(std::string_view descr);

/// The whole header, magic included: the bytes before the payload.
/// `shape` empty is a scalar, one dimension is written "(n,)".
Result<std::string> npy_header(std::string_view descr, const std::vector<std::int64_t>& shape);

/// Writes `path` (replacing it). `bytes` must be exactly the product of the
/// shape times the item size; a mismatch is an invalid error naming both.
Result<void> write_npy(const std::string& path, std::string_view descr,
                       const std::vector<std::int64_t>& shape, const void* data, std::size_t bytes);

}  // namespace epkit::util
