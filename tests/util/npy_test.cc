#include "util/npy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "support/temp_tree.h"

namespace epkit::util {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// What numpy.save writes before the payload: magic, version 1.0, the
// little-endian header length, the dict padded with spaces to 127 bytes of
// preamble + header, then '\n'.
std::string expected_header(const std::string& dict, std::size_t total) {
  std::string h("\x93NUMPY\x01\x00", 8);
  std::size_t len = total - 10;
  h += static_cast<char>(len & 0xff);
  h += static_cast<char>(len >> 8);
  h += dict;
  h.append(total - 1 - h.size(), ' ');
  h += '\n';
  return h;
}

TEST(Npy, ItemSizeComesFromTheTypeString) {
  EXPECT_EQ(npy_item_size("<f4").value(), 4u);
  EXPECT_EQ(npy_item_size("|u1").value(), 1u);
  EXPECT_EQ(npy_item_size("<i8").value(), 8u);
  EXPECT_EQ(npy_item_size("|b1").value(), 1u);
  EXPECT_FALSE(npy_item_size("f4").ok());
  EXPECT_FALSE(npy_item_size("<x4").ok());
  EXPECT_FALSE(npy_item_size("<f").ok());
  EXPECT_FALSE(npy_item_size("<f0").ok());
  EXPECT_NE(npy_item_size("<q4").error().message.find("'<q4'"), std::string::npos);
}

TEST(Npy, HeaderIsNumpysByteForByte) {
  // numpy.save(np.zeros((3, 4), np.float32)): 118-byte header, 128 in all.
  EXPECT_EQ(npy_header("<f4", {3, 4}).value(),
            expected_header("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 128));
  // One dimension has the trailing comma of a Python 1-tuple; a scalar is ().
  EXPECT_EQ(npy_header("<u2", {2}).value(),
            expected_header("{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", 128));
  EXPECT_EQ(npy_header("|u1", {}).value(),
            expected_header("{'descr': '|u1', 'fortran_order': False, 'shape': (), }", 128));
}

TEST(Npy, LongHeadersGrowByWholeBlocksOf64) {
  // Fourteen 7-digit dimensions make a dict of over 150 bytes: the header
  // takes the next multiple of 64.
  std::vector<std::int64_t> shape(14, 1000000);
  auto h = npy_header("<f4", shape).value();
  EXPECT_EQ(h.size() % 64, 0u);
  EXPECT_GT(h.size(), 128u);
  EXPECT_EQ(h.back(), '\n');
  EXPECT_EQ(static_cast<unsigned char>(h[8]) + 256u * static_cast<unsigned char>(h[9]),
            h.size() - 10);
  EXPECT_FALSE(npy_header("<f4", {-1, 2}).ok());
}

TEST(Npy, WritesHeaderThenPayloadInCOrder) {
  test::TempTree tree;
  std::string path = tree.path("/a.npy");
  const std::vector<std::int32_t> values = {1, -2, 3, 0x01020304, 5, 6};
  ASSERT_TRUE(write_npy(path, "<i4", {2, 3}, values.data(), values.size() * 4).ok());
  std::string bytes = read_all(path);
  std::string header =
      expected_header("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", 128);
  ASSERT_EQ(bytes.size(), header.size() + 24);
  EXPECT_EQ(bytes.substr(0, header.size()), header);
  // Little-endian int32, row after row.
  const std::string payload = bytes.substr(header.size());
  EXPECT_EQ(payload.substr(0, 4), std::string("\x01\x00\x00\x00", 4));
  EXPECT_EQ(payload.substr(4, 4), std::string("\xfe\xff\xff\xff", 4));
  EXPECT_EQ(payload.substr(12, 4), std::string("\x04\x03\x02\x01", 4));
  EXPECT_EQ(payload.substr(20, 4), std::string("\x06\x00\x00\x00", 4));
}

TEST(Npy, EmptyArraysHaveOnlyTheHeader) {
  test::TempTree tree;
  std::string path = tree.path("/empty.npy");
  ASSERT_TRUE(write_npy(path, "<u2", {0, 7168}, nullptr, 0).ok());
  EXPECT_EQ(read_all(path),
            expected_header("{'descr': '<u2', 'fortran_order': False, 'shape': (0, 7168), }", 128));
}

TEST(Npy, RefusesAPayloadOfTheWrongSizeAndAnUnwritablePath) {
  test::TempTree tree;
  std::vector<float> v(5);
  auto wrong = write_npy(tree.path("/b.npy"), "<f4", {2, 3}, v.data(), v.size() * 4);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("24 bytes"), std::string::npos) << wrong.error().message;
  EXPECT_NE(wrong.error().message.find("20 were given"), std::string::npos)
      << wrong.error().message;
  auto missing = write_npy(tree.path("/no/such/dir/c.npy"), "<f4", {1}, v.data(), 4);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("no/such/dir/c.npy"), std::string::npos);
}

}  // namespace
}  // namespace epkit::util
