#include "host/host.h"

namespace epkit::host {

Libraries Libraries::none(const std::string& why) {
  Libraries libs;
  libs.nvml = [why]() -> Result<const dl::NvmlApi*> {
    return make_error(ErrorCode::unavailable, why);
  };
  libs.cuda = [why]() -> Result<const dl::CudaApi*> {
    return make_error(ErrorCode::unavailable, why);
  };
  libs.ibverbs = [why]() -> Result<const dl::VerbsApi*> {
    return make_error(ErrorCode::unavailable, why);
  };
  return libs;
}

Host::Host(Sysroot fs, Env env, Libraries libs)
    : m_fs(std::move(fs)), m_env(std::move(env)), m_libs(std::move(libs)) {}

Host::Host(Sysroot fs, Env env)
    : Host(fs, std::move(env),
           fs.is_live()
               ? Libraries::real()
               : Libraries::none("not probed: libraries describe this machine, not --sysroot " +
                                 fs.root())) {}

}  // namespace epkit::host
