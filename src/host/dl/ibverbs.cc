#include "host/dl/ibverbs.h"

#include <fmt/format.h>
#include <infiniband/verbs.h>

#include <cstdlib>
#include <memory>
#include <mutex>

namespace epkit::host::dl {
namespace {

constexpr const char* k_version = "IBVERBS_1.1";

template <typename Fn>
bool bind_versioned(const DlLibrary& lib, Fn*& slot, const char* name, std::string& missing) {
  slot = reinterpret_cast<Fn*>(lib.versioned_symbol(name, k_version));
  if (slot == nullptr) {
    if (!missing.empty()) missing += ", ";
    missing += name;
  }
  return slot != nullptr;
}

}  // namespace

std::vector<std::string> ibverbs_candidates() {
  if (const char* value = std::getenv("EPKIT_IBVERBS_LIB"); value != nullptr && *value != '\0') {
    return {value};
  }
  return {"libibverbs.so.1", "libibverbs.so"};
}

Result<VerbsApi> open_ibverbs(const std::vector<std::string>& candidates, DlLibrary& holder) {
  auto lib = DlLibrary::open(candidates);
  if (!lib) {
    return make_error(ErrorCode::unavailable,
                      fmt::format("cannot open libibverbs: {}", lib.error().message));
  }
  VerbsApi api;
  std::string missing;
  bind_versioned(*lib, api.get_device_list, "ibv_get_device_list", missing);
  bind_versioned(*lib, api.free_device_list, "ibv_free_device_list", missing);
  bind_versioned(*lib, api.get_device_name, "ibv_get_device_name", missing);
  if (!missing.empty()) {
    return make_error(ErrorCode::unavailable,
                      fmt::format("{} lacks {} at version {}", lib->path(), missing, k_version));
  }
  api.path = lib->path();
  int count = 0;
  ibv_device** list = api.get_device_list(&count);
  if (list != nullptr) {
    for (int i = 0; i < count; ++i) {
      const char* name = api.get_device_name(list[i]);
      api.device_names.emplace_back(name != nullptr ? name : "?");
    }
    api.free_device_list(list);
  }
  api.device_count = list != nullptr ? count : 0;
  holder = std::move(*lib);
  return api;
}

Result<const VerbsApi*> load_ibverbs() {
  static std::once_flag once;
  static DlLibrary holder;
  static std::unique_ptr<Result<VerbsApi>> loaded;
  std::call_once(once, [] {
    loaded = std::make_unique<Result<VerbsApi>>(open_ibverbs(ibverbs_candidates(), holder));
  });
  if (!*loaded) return loaded->error();
  return &loaded->value();
}

}  // namespace epkit::host::dl
