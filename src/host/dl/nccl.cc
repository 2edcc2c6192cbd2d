#include "host/dl/nccl.h"

#ifdef EPKIT_WITH_CUDA

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>
#include <optional>

namespace epkit::host::dl {
std::string NcclApi::describe(ncclResult_t rc) const {
  const char* text = get_error_string != nullptr ? get_error_string(rc) : nullptr;
  return fmt::format("NCCL error {} ({})", static_cast<int>(rc),
                     text != nullptr ? text : "no description");
}

Result<NcclLibrary> open_nccl(const std::vector<std::string>& names) {
  auto lib = DlLibrary::open(names);
  if (!lib) return lib.error();
  NcclLibrary out{std::move(*lib), {}, 0, {}};
  NcclApi& a = out.api;
  const DlLibrary& l = out.library;
  for (auto err :
       {l.require(a.get_version, "ncclGetVersion"), l.require(a.get_unique_id, "ncclGetUniqueId"),
        l.require(a.get_error_string, "ncclGetErrorString"),
        l.require(a.get_last_error, "ncclGetLastError"),
        l.require(a.comm_init_rank_config, "ncclCommInitRankConfig"),
        l.require(a.comm_split, "ncclCommSplit"),
        l.require(a.comm_get_async_error, "ncclCommGetAsyncError"),
        l.require(a.comm_finalize, "ncclCommFinalize"),
        l.require(a.comm_destroy, "ncclCommDestroy"), l.require(a.comm_abort, "ncclCommAbort"),
        l.require(a.all_reduce, "ncclAllReduce"), l.require(a.all_gather, "ncclAllGather"),
        l.require(a.reduce_scatter, "ncclReduceScatter"), l.require(a.broadcast, "ncclBroadcast"),
        l.require(a.send, "ncclSend"), l.require(a.recv, "ncclRecv"),
        l.require(a.group_start, "ncclGroupStart"), l.require(a.group_end, "ncclGroupEnd")}) {
    if (err) return *err;
  }
  if (ncclResult_t rc = a.get_version(&out.version); rc != ncclSuccess) {
    return make_error(ErrorCode::nccl,
                      fmt::format("{}: ncclGetVersion failed: {}", l.name(), a.describe(rc)));
  }
  out.path = l.path();
  return out;
}

Result<const NcclLibrary*> load_nccl() {
  static std::once_flag once;
  static std::optional<Result<NcclLibrary>> loaded;
  std::call_once(once,
                 [] { loaded.emplace(open_nccl(candidates("EPKIT_NCCL_LIB", {"libnccl.so.2"}))); });
  if (!loaded->ok()) return loaded->error();
  return &loaded->value();
}

std::string nccl_version_string(int version) {
  // NCCL 2.9 moved to major*10000 + minor*100 + patch.
  if (version >= 20900) {
    return fmt::format("{}.{}.{}", version / 10000, (version % 10000) / 100, version % 100);
  }
  return fmt::format("{}.{}.{}", version / 1000, (version % 1000) / 100, version % 100);
}

}  // namespace epkit::host::dl

#endif
