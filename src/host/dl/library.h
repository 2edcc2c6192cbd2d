// DlLibrary: an owned dlopen handle.
//
// epkit must start on the broken nodes it diagnoses, so vendor libraries are
// opened at run time; a failure is a Result quoting dlerror(), never a crash.
#pragma once

#include <epkit/result.h>

#include <optional>
#include <string>
#include <vector>

namespace epkit::host::dl {

class DlLibrary {
 public:
  DlLibrary() = default;
  DlLibrary(const DlLibrary&) = delete;
  DlLibrary& operator=(const DlLibrary&) = delete;
  DlLibrary(DlLibrary&& other) noexcept;
  DlLibrary& operator=(DlLibrary&& other) noexcept;
  ~DlLibrary();

  /// Tries each candidate in order with RTLD_NOW|RTLD_LOCAL; the error lists
  /// every candidate's dlerror().
  static Result<DlLibrary> open(const std::vector<std::string>& candidates);

  bool loaded() const { return m_handle != nullptr; }
  /// The name that loaded, and the file the loader picked (dlinfo).
  const std::string& name() const { return m_name; }
  std::string path() const;

  /// dlsym; nullptr when absent.
  void* symbol(const char* name) const;
  /// dlvsym (symbol of one ELF version); nullptr when absent.
  void* versioned_symbol(const char* name, const char* version) const;

  /// Binds a required entry point: nullopt when found, else an unavailable
  /// error naming the library and symbol and quoting dlerror().
  template <typename Fn>
  std::optional<Error> require(Fn*& slot, const char* sym) const {
    clear_dl_error();
    if (bind(slot, sym)) return std::nullopt;
    return missing_symbol(sym);
  }

  /// Fill `slot` with the symbol or leave it null; returns whether found.
  template <typename Fn>
  bool bind(Fn*& slot, const char* sym) const {
    slot = reinterpret_cast<Fn*>(symbol(sym));
    return slot != nullptr;
  }

 private:
  static void clear_dl_error();
  Error missing_symbol(const char* sym) const;

  void* m_handle = nullptr;
  std::string m_name;
};

/// Candidates for a library: an override variable's value first (when set),
/// then the sonames given.
std::vector<std::string> candidates(const char* override_var, std::vector<std::string> sonames);

}  // namespace epkit::host::dl
