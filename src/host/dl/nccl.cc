#include "host/dl/nccl.h"

#ifdef EPKIT_WITH_CUDA

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>
#include <optional>

namespace epkit::host::dl {
namespace {

template <typename Fn>
std::optional<Error> bind_nccl(const DlLibrary& lib, Fn*& slot, const char* name) {
  dlerror();
  if (lib.bind(slot, name)) return std::nullopt;
  const char* why = dlerror();
  return make_error(ErrorCode::unavailable, fmt::format("{} lacks {}: {}", lib.name(), name,
                                                        why != nullptr ? why : "symbol not found"));
}

}  // namespace

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
       {bind_nccl(l, a.get_version, "ncclGetVersion"),
        bind_nccl(l, a.get_unique_id, "ncclGetUniqueId"),
        bind_nccl(l, a.get_error_string, "ncclGetErrorString"),
        bind_nccl(l, a.get_last_error, "ncclGetLastError"),
        bind_nccl(l, a.comm_init_rank_config, "ncclCommInitRankConfig"),
        bind_nccl(l, a.comm_split, "ncclCommSplit"),
        bind_nccl(l, a.comm_get_async_error, "ncclCommGetAsyncError"),
        bind_nccl(l, a.comm_finalize, "ncclCommFinalize"),
        bind_nccl(l, a.comm_destroy, "ncclCommDestroy"),
        bind_nccl(l, a.comm_abort, "ncclCommAbort"), bind_nccl(l, a.all_reduce, "ncclAllReduce"),
        bind_nccl(l, a.all_gather, "ncclAllGather"),
        bind_nccl(l, a.reduce_scatter, "ncclReduceScatter"),
        bind_nccl(l, a.broadcast, "ncclBroadcast"), bind_nccl(l, a.send, "ncclSend"),
        bind_nccl(l, a.recv, "ncclRecv"), bind_nccl(l, a.group_start, "ncclGroupStart"),
        bind_nccl(l, a.group_end, "ncclGroupEnd")}) {
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
