#include "host/dl/cuda.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdint>
#include <mutex>
#include <optional>

namespace epkit::host::dl {
namespace {

// cuGetProcAddress as libcuda exports it under its plain name (the CUDA 11.3
// ABI: symbol, function out, CUDA version, flags).
using GetProcAddress = CuResult (*)(const char*, void**, int, std::uint64_t);
// The CUDA version whose entry point ABIs we declared above (12.0).
constexpr int k_cuda_api_version = 12000;

class Binder {
 public:
  explicit Binder(const DlLibrary& lib) : m_lib(lib) { m_lib.bind(m_get_proc, "cuGetProcAddress"); }
  bool via_proc() const { return m_get_proc != nullptr; }

  template <typename Fn>
  std::optional<Error> operator()(Fn*& slot, const char* name) const {
    if (m_get_proc != nullptr) {
      void* fn = nullptr;
      if (m_get_proc(name, &fn, k_cuda_api_version, 0) == k_cuda_success && fn != nullptr) {
        slot = reinterpret_cast<Fn*>(fn);
        return std::nullopt;
      }
    }
    dlerror();
    if (m_lib.bind(slot, name)) return std::nullopt;
    const char* why = dlerror();
    return make_error(ErrorCode::unavailable,
                      fmt::format("{} lacks {}: {}", m_lib.name(), name,
                                  why != nullptr ? why : "symbol not found"));
  }

 private:
  const DlLibrary& m_lib;
  GetProcAddress m_get_proc = nullptr;
};

}  // namespace

std::string CudaApi::describe(CuResult rc) const {
  const char* text = nullptr;
  if (get_error_string == nullptr || get_error_string(rc, &text) != k_cuda_success) text = nullptr;
  return fmt::format("CUDA error {} ({})", rc, text != nullptr ? text : "no description");
}

Result<CudaLibrary> open_cuda(const std::vector<std::string>& names) {
  auto lib = DlLibrary::open(names);
  if (!lib) return lib.error();
  CudaLibrary out{std::move(*lib), {}, false};
  Binder bind(out.library);
  out.via_get_proc_address = bind.via_proc();
  CudaApi& api = out.api;
  for (auto err :
       {bind(api.init, "cuInit"), bind(api.driver_get_version, "cuDriverGetVersion"),
        bind(api.device_get_count, "cuDeviceGetCount"), bind(api.device_get, "cuDeviceGet"),
        bind(api.device_get_pci_bus_id, "cuDeviceGetPCIBusId"),
        bind(api.device_can_access_peer, "cuDeviceCanAccessPeer"),
        bind(api.get_error_string, "cuGetErrorString")}) {
    if (err) return *err;
  }
  return out;
}

Result<const CudaApi*> load_cuda() {
  static std::once_flag once;
  static std::optional<Result<CudaLibrary>> loaded;
  std::call_once(once,
                 [] { loaded.emplace(open_cuda(candidates("EPKIT_CUDA_LIB", {"libcuda.so.1"}))); });
  if (!loaded->ok()) return loaded->error();
  return &loaded->value().api;
}

}  // namespace epkit::host::dl
