#include "host/dl/library.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <link.h>

#include <cstdlib>

namespace epkit::host::dl {

DlLibrary::DlLibrary(DlLibrary&& other) noexcept
    : m_handle(other.m_handle), m_name(std::move(other.m_name)) {
  other.m_handle = nullptr;
}

DlLibrary& DlLibrary::operator=(DlLibrary&& other) noexcept {
  if (this != &other) {
    if (m_handle != nullptr) dlclose(m_handle);
    m_handle = other.m_handle;
    m_name = std::move(other.m_name);
    other.m_handle = nullptr;
  }
  return *this;
}

DlLibrary::~DlLibrary() {
  if (m_handle != nullptr) dlclose(m_handle);
}

Result<DlLibrary> DlLibrary::open(const std::vector<std::string>& names) {
  std::string errors;
  for (const auto& name : names) {
    dlerror();
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      DlLibrary lib;
      lib.m_handle = handle;
      lib.m_name = name;
      return lib;
    }
    const char* why = dlerror();
    if (!errors.empty()) errors += "; ";
    errors += why != nullptr ? why : fmt::format("{}: unknown dlopen error", name);
  }
  return make_error(ErrorCode::unavailable, errors);
}

std::string DlLibrary::path() const {
  if (m_handle == nullptr) return {};
  struct link_map* map = nullptr;
  if (dlinfo(m_handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_name == nullptr) {
    return m_name;
  }
  return map->l_name;
}

void* DlLibrary::symbol(const char* name) const {
  return m_handle != nullptr ? dlsym(m_handle, name) : nullptr;
}

void* DlLibrary::versioned_symbol(const char* name, const char* version) const {
  return m_handle != nullptr ? dlvsym(m_handle, name, version) : nullptr;
}

void DlLibrary::clear_dl_error() {
  dlerror();
}

Error DlLibrary::missing_symbol(const char* sym) const {
  const char* why = dlerror();
  return make_error(ErrorCode::unavailable, fmt::format("{} lacks {}: {}", m_name, sym,
                                                        why != nullptr ? why : "symbol not found"));
}

std::vector<std::string> candidates(const char* override_var, std::vector<std::string> sonames) {
  if (override_var != nullptr) {
    if (const char* value = std::getenv(override_var); value != nullptr && *value != '\0') {
      sonames.insert(sonames.begin(), value);
    }
  }
  return sonames;
}

}  // namespace epkit::host::dl
