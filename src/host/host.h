// Host: what a probe or check may look at on one node. The filesystem through
// the sysroot, the environment through Env, vendor libraries through dl
// wrappers. Under --sysroot other than "/", the libraries describe this
// machine, not the tree, so they report "not probed" instead.
#pragma once

#include <functional>

#include "host/env.h"
#include "host/sysroot.h"

namespace epkit::host {

namespace dl {
struct NvmlApi;
struct CudaApi;
struct VerbsApi;
}  // namespace dl

/// Loaders of the dlopen'd libraries. Real ones on the live node; tests
/// replace them with fakes (captureless lambdas filling the API structs).
struct Libraries {
  std::function<Result<const dl::NvmlApi*>()> nvml;
  std::function<Result<const dl::CudaApi*>()> cuda;
  std::function<Result<const dl::VerbsApi*>()> ibverbs;

  /// Every loader returning unavailable("<why>").
  static Libraries none(const std::string& why);
  /// The real loaders (defined beside each wrapper).
  static Libraries real();
};

class Host {
 public:
  Host(Sysroot fs, Env env, Libraries libs);
  /// Live node when fs is "/": real libraries; otherwise none.
  Host(Sysroot fs, Env env);

  const Sysroot& fs() const { return m_fs; }
  const Env& env() const { return m_env; }
  const Libraries& libs() const { return m_libs; }
  bool live() const { return m_fs.is_live(); }

 private:
  Sysroot m_fs;
  Env m_env;
  Libraries m_libs;
};

}  // namespace epkit::host
