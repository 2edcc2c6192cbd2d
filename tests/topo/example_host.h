// Hosts over the committed example trees, read in place (copying a tree with
// TempTree is for tests that change it).
#pragma once

#include <string>

#include "host/host.h"
#include "support/paths.h"

namespace epkit::test {

inline host::Host example_host(const std::string& name, host::Env env = host::Env({}, "test")) {
  return host::Host(host::Sysroot(source_path("examples/" + name)), std::move(env),
                    host::Libraries::none("not probed: test tree"));
}

}  // namespace epkit::test
