// Where the dynamic loader would find a library on the node.
//
// Emulates ld.so's search for a soname: LD_LIBRARY_PATH (in order), then the
// folders of /etc/ld.so.conf (with its `include` globs, files sorted), then the
// built-in default folders. Every match is returned in that order; the first
// one wins. Not modelled: the calling program's RPATH/RUNPATH (they come
// before or after LD_LIBRARY_PATH depending on which is set), LD_PRELOAD, and
// a stale /etc/ld.so.cache (the loader reads the cache, not the conf files,
// so a folder added without running ldconfig is not searched yet).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "host/env.h"
#include "host/sysroot.h"

namespace epkit::host {

struct SearchDir {
  std::string dir;     // node path, as written ("/usr/local/nvidia/lib64")
  std::string origin;  // "LD_LIBRARY_PATH", "/etc/ld.so.conf.d/x.conf", "default"
  int position = 0;    // 1-based entry number within LD_LIBRARY_PATH, else 0
};

struct LibMatch {
  std::string dir;
  std::string node_path;  // dir + "/" + soname
  std::string real_path;  // node_path with every link followed
  std::string origin;     // as SearchDir::origin
  int position = 0;       // as SearchDir::position
  std::string version;    // numeric suffix of real_path's name, or "unknown"
};

/// The folders in search order, duplicates dropped (the first origin kept).
/// Folders that do not exist are kept: the loader tries them too.
std::vector<SearchDir> loader_search_dirs(const Sysroot& fs, const Env& env);

/// The loader's built-in folders (x86-64 and aarch64 multiarch, lib64, lib).
const std::vector<std::string>& default_library_dirs();

/// Every file named `soname` in the search folders, in search order. A
/// dangling link is no match (the loader skips it).
std::vector<LibMatch> find_library(const Sysroot& fs, const Env& env, std::string_view soname);

/// Words of `text` between any of `separators`, empty words dropped (config
/// lines of ld.so.conf and libibverbs' driver lists).
std::vector<std::string> split_any(std::string_view text, std::string_view separators);

/// "libibverbs.so.1.14.56.0" -> "1.14.56.0"; "libfoo.so" -> "unknown".
std::string library_version(std::string_view file_name);

}  // namespace epkit::host
