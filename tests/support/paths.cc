#include "support/paths.h"

namespace epkit::test {

std::string source_dir() {
  return EPKIT_SOURCE_DIR;
}

std::string source_path(std::string_view relative) {
  std::string path = source_dir();
  path += '/';
  path += relative;
  return path;
}

std::string epkit_binary() {
  return EPKIT_BINARY;
}

std::string cxx_compiler() {
  return EPKIT_CXX_COMPILER;
}

}  // namespace epkit::test
