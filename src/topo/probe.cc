#include "topo/probe.h"

namespace epkit::topo {

Snapshot probe(const host::Host& host) {
  Snapshot snap;
  snap.sysroot = host.fs().is_live() ? "/" : host.fs().root();
  return snap;
}

}  // namespace epkit::topo
