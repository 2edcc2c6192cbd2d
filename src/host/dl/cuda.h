// Typed wrapper over libcuda (the driver API), opened with dlopen.
//
// The driver's entry points are fetched through cuGetProcAddress when the
// library has it, so that the version matching the CUDA release we ask for
// is the one bound (plain dlsym can return an older ABI of a versioned
// entry point); dlsym is the fallback for drivers before CUDA 11.3.
#pragma once

#include <epkit/result.h>

#include <string>
#include <vector>

#include "host/dl/library.h"

namespace epkit::host::dl {

using CuResult = int;  // CUresult: 0 CUDA_SUCCESS
using CuDevice = int;  // CUdevice
inline constexpr CuResult k_cuda_success = 0;

struct CudaApi {
  CuResult (*init)(unsigned) = nullptr;                               // cuInit
  CuResult (*driver_get_version)(int*) = nullptr;                     // cuDriverGetVersion
  CuResult (*device_get_count)(int*) = nullptr;                       // cuDeviceGetCount
  CuResult (*device_get)(CuDevice*, int) = nullptr;                   // cuDeviceGet
  CuResult (*device_get_pci_bus_id)(char*, int, CuDevice) = nullptr;  // cuDeviceGetPCIBusId
  CuResult (*device_can_access_peer)(int*, CuDevice, CuDevice) = nullptr;
  CuResult (*get_error_string)(CuResult, const char**) = nullptr;  // cuGetErrorString

  /// "CUDA error 100 (no CUDA-capable device is detected)".
  std::string describe(CuResult rc) const;
};

struct CudaLibrary {
  DlLibrary library;
  CudaApi api;
  bool via_get_proc_address = false;
};

/// Opens and binds; a missing entry point is unavailable naming it (with
/// dlerror() or cuGetProcAddress's code). Not cached.
Result<CudaLibrary> open_cuda(const std::vector<std::string>& candidates);

/// Process-wide libcuda: EPKIT_CUDA_LIB, then libcuda.so.1; loaded once.
/// Does not call cuInit (callers do, and report its error).
Result<const CudaApi*> load_cuda();

}  // namespace epkit::host::dl
