// rdma.* checks: the verbs userspace (libibverbs and its providers), the RDMA
// devices a container was given, RoCE GID selection and GPUDirect RDMA.
//
// The userspace checks replay what ld.so and libibverbs do, from files only:
// which libibverbs.so.1 the loader picks (host/libsearch.h), the private ABI it
// defines and the provider file it will open for each device's driver (ELF
// version records, host/elf.h). They never dlopen a provider: that would load
// it into the doctor itself and mix two rdma-core releases in one process.
// docs/rdma-checks.md describes each decision.
//
// One file per job: rdma_userspace.cc (libraries and providers), rdma_devices.cc
// (devices and ports), rdma_gid.cc (RoCE GIDs), rdma_gpudirect.cc; this file
// lists them.
#include "checks/rdma_common.h"

namespace epkit::checks {
namespace {

using namespace rdma;

constexpr Check k_rdma_checks[] = {
    {"rdma.verbs-lib", "libibverbs loads and only one release is reachable", &check_verbs_lib},
    {"rdma.provider-abi", "providers match libibverbs' private ABI", &check_provider_abi},
    {"rdma.provider-path", "a provider file for every device's driver", &check_provider_path},
    {"rdma.devices", "RDMA devices exposed with ACTIVE ports", &check_devices},
    {"rdma.gid-index", "RoCE GID index names a RoCE v2 IPv4 GID", &check_gid_index},
    {"rdma.gpudirect", "GPUDirect RDMA available (peer memory or DMA-BUF)", &check_gpudirect},
};

}  // namespace

std::span<const Check> rdma_checks() {
  return k_rdma_checks;
}

}  // namespace epkit::checks
