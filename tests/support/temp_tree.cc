#include "support/temp_tree.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "support/paths.h"

namespace fs = std::filesystem;

namespace epkit::test {

TempTree::TempTree() {
  std::string templ = (fs::temp_directory_path() / "epkit-test-XXXXXX").string();
  char* made = ::mkdtemp(templ.data());
  if (made == nullptr) throw std::runtime_error("mkdtemp failed");
  m_root = made;
}

TempTree::TempTree(std::string_view source_relative) : TempTree() {
  fs::copy(source_path(source_relative), m_root,
           fs::copy_options::recursive | fs::copy_options::copy_symlinks);
}

TempTree::~TempTree() {
  std::error_code ec;
  fs::remove_all(m_root, ec);
}

std::string TempTree::path(std::string_view node_path) const {
  std::string p(node_path);
  if (p.empty() || p.front() != '/') p = "/" + p;
  return m_root + p;
}

void TempTree::write(std::string_view node_path, std::string_view content) const {
  fs::path p = path(node_path);
  fs::create_directories(p.parent_path());
  std::error_code ec;
  if (fs::is_symlink(p, ec)) fs::remove(p);
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << content;
}

void TempTree::link(std::string_view node_path, std::string_view target) const {
  fs::path p = path(node_path);
  fs::create_directories(p.parent_path());
  std::error_code ec;
  fs::remove(p, ec);
  fs::create_symlink(std::string(target), p);
}

void TempTree::mkdir(std::string_view node_path) const {
  fs::create_directories(path(node_path));
}

void TempTree::remove(std::string_view node_path) const {
  std::error_code ec;
  fs::remove_all(path(node_path), ec);
}

host::Host TempTree::host(host::Env env) const {
  return host::Host(host::Sysroot(m_root), std::move(env),
                    host::Libraries::none("not probed: test tree"));
}

std::string build_shared_object(const std::string& out_path, const std::string& c_source,
                                const std::string& version_script, const std::string& extra_flags) {
  fs::create_directories(fs::path(out_path).parent_path());
  std::string src = out_path + ".c";
  std::ofstream(src) << c_source;
  std::string cmd = cxx_compiler() + " -x c -shared -fPIC -o '" + out_path + "' '" + src + "'";
  if (!version_script.empty()) {
    std::string map = out_path + ".map";
    std::ofstream(map) << version_script;
    cmd += " -Wl,--version-script='" + map + "'";
  }
  cmd += " " + extra_flags + " 2>&1";
  int rc = std::system(cmd.c_str());
  fs::remove(src);
  if (!version_script.empty()) fs::remove(out_path + ".map");
  if (rc != 0) {
    ADD_FAILURE() << "building " << out_path << " failed: " << cmd;
    return "";
  }
  return out_path;
}

}  // namespace epkit::test
