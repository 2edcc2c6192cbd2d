// Typed wrapper over libnccl, opened with dlopen (see library.h).
//
// epkit never links libnccl: a node whose NCCL is missing or broken must
// still run `epkit doctor`, and the GPU commands must say which library they
// tried. The types come from <nccl.h> (toolkit headers), so this wrapper only
// exists in builds with CUDA (EPKIT_WITH_CUDA).
#pragma once

#include <epkit/result.h>

#include <string>
#include <vector>

#include "host/dl/library.h"

#ifdef EPKIT_WITH_CUDA
#include <nccl.h>

namespace epkit::host::dl {

struct NcclApi {
  ncclResult_t (*get_version)(int*) = nullptr;              // ncclGetVersion
  ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;   // ncclGetUniqueId
  const char* (*get_error_string)(ncclResult_t) = nullptr;  // ncclGetErrorString
  const char* (*get_last_error)(ncclComm_t) = nullptr;      // ncclGetLastError
  ncclResult_t (*comm_init_rank_config)(ncclComm_t*, int, ncclUniqueId, int,
                                        ncclConfig_t*) = nullptr;
  ncclResult_t (*comm_split)(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*) = nullptr;
  ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t*) = nullptr;
  ncclResult_t (*comm_finalize)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_abort)(ncclComm_t) = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  ncclResult_t (*reduce_scatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                 ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t,
                       cudaStream_t) = nullptr;
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*group_start)() = nullptr;  // ncclGroupStart
  ncclResult_t (*group_end)() = nullptr;    // ncclGroupEnd

  /// "NCCL error 2 (unhandled system error)".
  std::string describe(ncclResult_t rc) const;
};

struct NcclLibrary {
  DlLibrary library;
  NcclApi api;
  int version = 0;   // ncclGetVersion: 22809 for 2.28.9
  std::string path;  // the file the loader picked
};

/// Opens the first candidate and binds every entry point; a missing symbol
/// is unavailable naming it and quoting dlerror(). Not cached (tests).
Result<NcclLibrary> open_nccl(const std::vector<std::string>& candidates);

/// The process-wide NCCL: candidates EPKIT_NCCL_LIB, then libnccl.so.2;
/// loaded once and cached, failure included.
Result<const NcclLibrary*> load_nccl();

/// 22809 -> "2.28.9" (and the pre-2.9 scheme 2708 -> "2.7.8").
std::string nccl_version_string(int version);

}  // namespace epkit::host::dl

#else

namespace epkit::host::dl {
/// Without CUDA there is no NCCL wrapper; this names the cause.
inline Error nccl_not_built() {
  return make_error(ErrorCode::unavailable,
                    "this epkit was built without CUDA (no nvcc at build time); GPU commands "
                    "need a build with the CUDA toolkit");
}
}  // namespace epkit::host::dl

#endif
